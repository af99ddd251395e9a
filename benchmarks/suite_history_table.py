"""The history A/B of stop 32 as one table: ``python benchmarks/suite_history_table.py docs/figures/suite_full_stop32``.

Per scenario, median samples/s of each method (range over repeats), the history tuner against hindsight, the
default and static-at-the-history's-pick; AutoByte and static-history against hindsight and the default; the worst
50-iteration span of the history tuner against its own start's run (static-history, same repeat) and of AutoByte
against the default's; trials per run. Geometric means per tag.
"""
import json, os, sys, math, statistics as st, csv
from autobyte.bench._suite import worst_span_ratio
root = sys.argv[1]
M = ['bytescheduler', 'hindsight', 'autobyte', 'tuner:autobyte-history', 'tuner:static-history']
def geo(xs): return math.exp(sum(math.log(x) for x in xs) / len(xs))
agg = {}
print('| scenario (tag) | default | hindsight | AutoByte | AutoByte + history | static at the history\'s pick | history vs hindsight / default / static-history | AutoByte vs hindsight / default | static-history vs hindsight / default | worst 50-it: history vs its start (static-history run) / AutoByte vs default | trials/run: history / AutoByte |')
print('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
order = ['cnn-step', 'transformer-3rate', 'mlp-flow', 'cnn-straggler', 'heldout-transformer-asym', 'heldout-mlp-walk']
for sc in order:
    p = os.path.join(root, sc, 'summary.json')
    if not os.path.exists(p): continue
    s = json.load(open(p)); m = s['methods']
    med = {k: m[k]['median'] for k in M if k in m}
    rng = {k: (m[k]['min'], m[k]['max']) for k in M if k in m}
    rows = list(csv.DictReader(open(os.path.join(root, sc, 'iterations.csv'))))
    def span(a, b):
        out = []
        for rep in sorted({r['repeat'] for r in rows}):
            x = [float(r['seconds']) for r in rows if r['method'] == a and r['repeat'] == rep]
            y = [float(r['seconds']) for r in rows if r['method'] == b and r['repeat'] == rep]
            if x and y: out.append(worst_span_ratio(x, y)[0])
        return st.median(out)
    h, d, sh, ab, ah = med['hindsight'], med['bytescheduler'], med['tuner:static-history'], med['autobyte'], med['tuner:autobyte-history']
    tr = lambda k: m[k].get('trials', {}).get('trials', float('nan'))
    tag = s['tag']
    agg.setdefault(tag, []).append((ah / h, ah / d, ah / sh, ab / h, ab / d, sh / h, sh / d, h / d))
    f = lambda k: f"{med[k]:.1f} ({rng[k][0]:.1f}-{rng[k][1]:.1f})"
    print(f"| {sc} ({tag}) | {f('bytescheduler')} | {f('hindsight')} | {f('autobyte')} | {f('tuner:autobyte-history')} | {f('tuner:static-history')} | "
          f"{ah/h:.3f} / {ah/d:.3f} / {ah/sh:.3f} | {ab/h:.3f} / {ab/d:.3f} | {sh/h:.3f} / {sh/d:.3f} | "
          f"{span('tuner:autobyte-history','tuner:static-history'):.3f} / {span('autobyte','bytescheduler'):.3f} | {tr('tuner:autobyte-history'):g} / {tr('autobyte'):g} |")
for tag, v in agg.items():
    g = [geo([x[i] for x in v]) for i in range(8)]
    print(f"| geomean {tag} ({len(v)}) | | | | | | {g[0]:.3f} / {g[1]:.3f} / {g[2]:.3f} | {g[3]:.3f} / {g[4]:.3f} | {g[5]:.3f} / {g[6]:.3f} | | | hindsight vs default {g[7]:.3f}")
