"""Discrete-event simulation of steady-state, scheduled training iterations.

What one iteration is made of (see ``docs/simulator.md`` for the rationale):

* **Compute**, per worker: layer-by-layer forward, then backward from the last
  layer; a layer's gradient is ready when its backward ends. Layer ``l``'s
  forward of iteration ``k+1`` starts only once its own parameters of
  iteration ``k`` are communicated and updated (cross-iteration overlap).
* **Scheduling**: the gradients are cut and fused into messages by
  :func:`autobyte.core.scheduler.plan_messages`; ready messages are released
  by a :class:`autobyte.core.scheduler.CreditQueue` (priority to the layer
  nearest the input, credit window of bytes in flight) - the very objects the
  engines use.
* **Per message**: a serial CPU cost ``per_message_s`` on the dispatching
  side, then a fixed network delay (``2(n-1)`` ring steps of ``latency_s``
  for all-reduce; one round trip per push and per pull for PS), then its
  bytes on the links. All-reduce moves ``2(n-1)/n`` of the message over each
  link; PS pushes ``(n-1)/n`` and pulls ``(n-1)/n`` per link on average, but a
  single message is limited by its one server's link (``(n-1)`` flows converge
  on it), so PS needs about ``n`` messages in flight to fill the links.
* **Bandwidth sharing**: messages in flight share the bottleneck link equally
  (processor sharing), computed exactly with a virtual-time clock, so credit
  beyond what fills the link only delays the high-priority messages.
* **16 bits on the wire** (``config.wire`` ``"bf16"`` / ``"fp16"``): messages
  are planned over the tensors as they travel
  (:func:`autobyte.core.scheduler.on_wire`: half the bytes), and each pays
  two casts of its fp32 bytes at ``cluster.cast_Bps``, where the torch engine
  runs them: the cast (and division) into the 16-bit buffer on the
  dispatching side, serial with the per-message cost, and the cast back on
  the completing side, serial over messages, before its credit is returned
  and its layers updated.

The link is the slowest worker's ``min(up, down)``: a ring and a synchronous
PS step both move at the pace of their slowest member.
"""

from __future__ import annotations

import math
from heapq import heappop, heappush
from typing import Sequence

import numpy as np

from ..core.scheduler import CreditQueue, Message, Segment, TensorSpec, on_wire, plan_messages
from ..core.space import Config, SearchSpace
from ._cluster import Cluster, Trace, resolve_traces
from ._models import ModelProfile
from ._result import SimResult, _IterRecord, _Plan

#: Above this many messages per iteration, runs of chunks of one split tensor
#: are simulated as groups (see :func:`_coarsen`): exact enough in the regime
#: where they occur (tiny partitions, per-message cost dominates) and keeps
#: one iteration under a few milliseconds.
DEFAULT_MAX_MESSAGES = 1024


_PLANS: dict[tuple[str, int, int, str], _Plan] = {}


def _tensors(model: ModelProfile, wire: str = "fp32") -> list[TensorSpec]:
    """One fp32 tensor per layer, as it travels at precision ``wire``."""
    lb = model.layer_bytes
    if np.all(lb % 4 == 0):
        return on_wire([TensorSpec(f"layer{i}", int(b) // 4, 4, i) for i, b in enumerate(lb)], wire)
    if wire == "fp32":  # sizes that are no whole number of fp32 elements: count bytes
        return [TensorSpec(f"layer{i}", int(b), 1, i) for i, b in enumerate(lb)]
    return [TensorSpec(f"layer{i}", max(1, int(b) // 4), 2, i, "bfloat16") for i, b in enumerate(lb)]


def cast_s(wire_bytes: np.ndarray | float, wire: str, cast_Bps: float) -> np.ndarray | float:
    """Seconds of one cast pass between fp32 and ``wire`` of a message of ``wire_bytes`` on the wire (0 at fp32)."""
    if wire == "fp32":
        return 0.0 * wire_bytes
    return 2.0 * wire_bytes / cast_Bps


def _coarsen(msgs: list[Message], max_messages: int) -> tuple[list[Message], np.ndarray]:
    """Group consecutive chunks of each split tensor so that at most about
    ``max_messages`` messages remain. A group of ``g`` chunks pays ``g``
    per-message costs; see ``_comm`` for how its credit is scaled."""
    n_split = sum(1 for m in msgs if len(m.segments) == 1 and (m.chunk > 0 or _is_split(m, msgs)))
    n_other = len(msgs) - n_split
    budget = max(1, max_messages - n_other)
    g = max(1, math.ceil(n_split / budget))
    out: list[Message] = []
    counts: list[int] = []
    i = 0
    while i < len(msgs):
        m = msgs[i]
        if len(m.segments) == 1:
            t = m.segments[0].tensor
            j = i + 1
            while j < len(msgs) and j - i < g and len(msgs[j].segments) == 1 and msgs[j].segments[0].tensor == t:
                j += 1
            if j - i > 1:
                segs = [s for mm in msgs[i:j] for s in mm.segments]
                seg = Segment(t, min(s.start for s in segs), max(s.stop for s in segs))
                out.append(Message(len(out), (seg,), sum(mm.nbytes for mm in msgs[i:j]), m.priority, m.chunk, m.dtype))
                counts.append(j - i)
                i = j
                continue
        out.append(Message(len(out), m.segments, m.nbytes, m.priority, m.chunk, m.dtype))
        counts.append(1)
        i += 1
    return out, np.array(counts, dtype=np.int64)


def _is_split(m: Message, msgs: list[Message]) -> bool:
    return m.chunk == 0 and m.index + 1 < len(msgs) and msgs[m.index + 1].chunk == 1 and msgs[m.index + 1].segments[0].tensor == m.segments[0].tensor


def _plan(model: ModelProfile, partition_bytes: int, max_messages: int, wire: str = "fp32") -> _Plan:
    key = (model._key, partition_bytes, max_messages, wire)
    p = _PLANS.get(key)
    if p is not None:
        return p
    msgs = plan_messages(_tensors(model, wire), partition_bytes)
    n_real = len(msgs)
    if len(msgs) > max_messages:
        msgs, chunks = _coarsen(msgs, max_messages)
    else:
        chunks = np.ones(len(msgs), dtype=np.int64)
    seg_msg = np.array([m.index for m in msgs for _ in m.segments], dtype=np.int64)
    seg_tensor = np.array([s.tensor for m in msgs for s in m.segments], dtype=np.int64)
    p = _Plan(
        messages=msgs,
        nbytes=np.array([m.nbytes for m in msgs], dtype=np.float64),
        last_tensor=np.array([min(s.tensor for s in m.segments) for m in msgs], dtype=np.int64),
        seg_msg=seg_msg,
        seg_tensor=seg_tensor,
        chunks=chunks,
        n_real=n_real,
    )
    if len(_PLANS) > 4096:
        _PLANS.clear()
    _PLANS[key] = p
    return p


def _comm(
    plan: _Plan,
    credit_bytes: int,
    ready: np.ndarray,
    *,
    ps: bool,
    n: int,
    link_Bps: float,
    overhead_s: np.ndarray,
    delay_s: float,
    between_s: np.ndarray,
    contention: float = 0.0,
    big: np.ndarray | None = None,
    extra_delay_s: np.ndarray | None = None,
    finish_s: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """One iteration's communication. Returns (release, done) times per message.

    Processor sharing of the bottleneck link, computed exactly with virtual
    clocks. Transfers are of two classes: *spread* ones (every ring
    collective; PS messages large enough to be sliced over all servers) share
    the link equally; *single-server* PS messages are each capped at
    ``link / n`` (their ``n - 1`` flows converge on one server's link) and
    the spread ones take what they leave. With ``k`` transfers in flight the
    link delivers ``1 / (1 + contention * (k - 1))`` of its rate.

    ``finish_s`` (16 bits on the wire: the cast back): work after a message's
    transfer, serial over messages in the order their transfers end; the
    message is done (credit returned) when it ends.
    """
    msgs = plan.messages
    M = len(msgs)
    if ps:
        work = ((n - 1) / n * plan.nbytes).tolist()
        small = [False] * M if big is None else (~big).tolist()
    else:
        work = (2.0 * (n - 1) / n * plan.nbytes).tolist()
        small = [False] * M
    ovh = overhead_s.tolist()
    betw = between_s.tolist()
    first_delay = (delay_s + extra_delay_s).tolist() if extra_delay_s is not None else [delay_s] * M
    order = np.argsort(ready, kind="stable")
    rt = ready[order].tolist()
    order_l = order.tolist()
    q = CreditQueue(msgs, credit_bytes)
    release = [0.0] * M
    done = [0.0] * M
    pull = [False] * M
    ev: list[tuple[float, int]] = []  # (time a transfer joins the link, msg)
    fin: list[tuple[float, int]] = []  # (time a message's finishing work ends, msg)
    fin_s = finish_s.tolist() if finish_s is not None else None
    fdisp = -math.inf
    act_b: list[tuple[float, int]] = []  # spread transfers: (virtual finish tag, msg)
    act_s: list[tuple[float, int]] = []  # single-server transfers
    inf = math.inf
    C = link_Bps
    if not math.isfinite(C):  # infinite bandwidth: transfers take no time
        work = [0.0] * M
        C = 1.0
    t = 0.0
    vb = vs = 0.0
    kb = ks = 0
    rb = rs = 0.0
    disp = -inf
    ri = 0
    ndone = 0
    mark_ready = q.mark_ready
    rel = q.release
    while ndone < M:
        tr = rt[ri] if ri < M else inf
        te = ev[0][0] if ev else inf
        k = kb + ks
        if k:
            ce = C / (1.0 + contention * (k - 1))
            if ks:
                rs = ce / (ks if ks > n else n) if kb == 0 else min(ce / n, ce / k)
            if kb:
                rb = (ce - ks * rs) / kb
        tcb = t + (act_b[0][0] - vb) / rb if kb else inf
        tcs = t + (act_s[0][0] - vs) / rs if ks else inf
        tc = tcb if tcb < tcs else tcs
        tn = tc if tc < te else te
        tf = fin[0][0] if fin else inf
        if tf < tn:
            tn = tf
        if tr < tn:
            tn = tr
        dt = tn - t
        if kb:
            vb += dt * rb
        if ks:
            vs += dt * rs
        t = tn
        if tn == tc:
            if tcb <= tcs:
                tag, i = heappop(act_b)
                vb = tag
                kb -= 1
            else:
                tag, i = heappop(act_s)
                vs = tag
                ks -= 1
            if ps and not pull[i]:
                pull[i] = True
                heappush(ev, (t + betw[i] + delay_s, i))
                continue
            if fin_s is not None:
                fdisp = (t if t > fdisp else fdisp) + fin_s[i]
                heappush(fin, (fdisp, i))
                continue
            done[i] = t
            ndone += 1
            q.mark_done(i)
        elif tn == tf:
            _, i = heappop(fin)
            done[i] = t
            ndone += 1
            q.mark_done(i)
        elif tn == te:
            _, i = heappop(ev)
            if small[i]:
                ks += 1
                heappush(act_s, (vs + work[i], i))
            else:
                kb += 1
                heappush(act_b, (vb + work[i], i))
            continue
        else:
            while ri < M and rt[ri] <= t:
                mark_ready(order_l[ri])
                ri += 1
        for j in rel():
            start = (t if t > disp else disp) + ovh[j]
            disp = start
            release[j] = t
            heappush(ev, (start + first_delay[j], j))
    return np.array(release), np.array(done)


def _as_config(config: object) -> Config:
    if isinstance(config, Config):
        return config
    if isinstance(config, (tuple, list)) and len(config) == 2:
        return Config(*config)  # type: ignore[arg-type]
    raise TypeError(f"config must be a Config (or a (partition_bytes, credit_bytes) pair), but got config={config!r}.")


def simulate(
    model: ModelProfile,
    cluster: Cluster,
    config: Config,
    n_iters: int = 10,
    seed: int = 0,
    traces: Sequence[Trace] | Trace | None = None,
    *,
    warmup_iters: int = 1,
    max_messages: int = DEFAULT_MAX_MESSAGES,
    start_iter: int = 0,
    space: SearchSpace | None = None,
) -> SimResult:
    """Simulate ``n_iters`` steady-state iterations of ``model`` on ``cluster`` under ``config``.

    Args:
        model: a :class:`ModelProfile` (e.g. ``get_model("resnet50")``).
        cluster: the :class:`Cluster`.
        config: ``<partition_bytes, credit_bytes>`` and the gradients'
            precision on the wire (``config.wire``: at ``"bf16"`` / ``"fp16"``
            messages carry half the bytes and pay the casts, see the module's
            docstring and ``cluster.cast_Bps``).
        n_iters: iterations reported.
        seed: seed of the compute jitter.
        traces: :class:`BandwidthTrace` and/or :class:`ComputeTrace`; trace
            iteration ``i`` is reported iteration ``i`` (warm-up iterations
            take the conditions of iteration ``start_iter``).
        warmup_iters: iterations simulated before the reported ones, so that
            the first reported one already overlaps with its predecessor.
        max_messages: see :data:`DEFAULT_MAX_MESSAGES`.
        start_iter: trace iteration of the first reported iteration.
        space: if given, ``config`` must be one of its candidates.

    Returns:
        :class:`SimResult`.

    Raises:
        TypeError: ``model``, ``cluster`` or ``config`` of the wrong type.
        ValueError: ``n_iters < 1``, negative ``warmup_iters``, bad traces,
            ``config`` outside ``space``.
    """
    if not isinstance(model, ModelProfile):
        raise TypeError(f"model must be a ModelProfile (see autobyte.sim.get_model), but got model={model!r}.")
    if not isinstance(cluster, Cluster):
        raise TypeError(f"cluster must be a Cluster, but got cluster={cluster!r}.")
    config = _as_config(config)
    if space is not None and config not in space:
        raise ValueError(f"config must be one of the {len(space)} candidates of the search space, but got config={config}.")
    for nm, v, lo in (("n_iters", n_iters, 1), ("warmup_iters", warmup_iters, 0), ("max_messages", max_messages, 16), ("start_iter", start_iter, 0)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ValueError(f"{nm} must be an integer >= {lo}, but got {nm}={v!r}.")
    n = cluster.n_workers
    L = model.n_layers
    total = warmup_iters + n_iters
    cond = resolve_traces(cluster, traces, start_iter + n_iters)
    # warm-up iterations run under the first reported iteration's conditions
    idx = np.concatenate([np.full(warmup_iters, start_iter, dtype=np.int64), np.arange(start_iter, start_iter + n_iters)])
    up, down, scale = cond.up[idx], cond.down[idx], cond.scale[idx]
    link = np.minimum(up, down).min(axis=1)  # (total,)

    rng = np.random.default_rng(seed)
    if cluster.jitter > 0:
        s = cluster.jitter
        per_iter = rng.lognormal(-s * s / 2, s, size=(total, n, 1))
        per_layer = rng.lognormal(-s * s / 8, s / 2, size=(total, n, L))
        noise = per_iter * per_layer
    else:
        noise = np.ones((total, n, L))
    mult = noise * scale[:, :, None]
    F = model.forward_s[None, None, :] * mult
    B = model.backward_s[None, None, :] * mult

    wire = config.wire
    plan = _plan(model, config.partition_bytes, max_messages, wire)
    ps = cluster.arch == "ps"
    # A simulated message standing for g real ones pays g per-message costs;
    # PS pays for the push and the pull.
    overhead = cluster.per_message_s * plan.chunks * (2 if ps else 1)
    finish = None
    if wire != "fp32":  # the cast into the 16-bit buffer before the send, the cast back after
        cast = np.asarray(cast_s(plan.nbytes, wire, cluster.cast_Bps))
        overhead = overhead + cast
        finish = cast
    delay = (2.0 * cluster.latency_s) if ps else (2.0 * (n - 1) * cluster.latency_s)
    between = plan.nbytes * n / cluster.ps_aggregate_Bps if ps else np.zeros(len(plan.messages))
    # Grouped messages (tiny partitions): keep the number of chunk-sized
    # messages in flight, and charge each of the g - 1 extra chunks the stall
    # a window of k chunks suffers when one chunk's life (overhead + delay +
    # transfer) exceeds k times its throughput-limited cycle.
    credit = config.credit_bytes
    extra = None
    elem_ratio = 1 if wire == "fp32" else 2  # fp32 bytes per wire byte: the big-array bound counts elements
    if plan.n_real != len(plan.messages):
        g = int(plan.chunks.max())
        credit = int(min(credit * g, 1 << 50))
        chunk = config.partition_bytes
        kk = max(1, config.credit_bytes // chunk)
        c1 = float(cast_s(chunk, wire, cluster.cast_Bps))  # each cast pass of one chunk (0 at fp32)
        o1 = cluster.per_message_s * (2 if ps else 1) + c1
        lf = float(np.min(link))
        x = (2.0 * (n - 1) / n * chunk / lf * (n if ps and chunk * elem_ratio < cluster.ps_bigarray_bytes else 1)) if math.isfinite(lf) else 0.0
        d_all = delay * (2 if ps else 1)
        if kk == 1:  # stop-and-wait: every chunk pays its own network delay (and its cast back)
            stall = d_all + c1
        else:
            life = o1 + c1 + d_all + x * (1.0 + cluster.contention * (kk - 1))
            # k grouped messages are in flight too, so each carries k chunks' stall
            stall = max(0.0, life - kk * max(o1, x))
        extra = (plan.chunks - 1) * stall
    # MXNet's KVStore slices arrays of at least MXNET_KVSTORE_BIGARRAY_BOUND
    # elements (default 1,000,000) over all servers; smaller ones live on one.
    big = (plan.nbytes * elem_ratio / plan.chunks) >= cluster.ps_bigarray_bytes
    update = model.layer_bytes / cluster.update_Bps if not ps else np.zeros(L)

    pr = np.zeros(L)
    start = np.zeros(n)
    recs: list[_IterRecord] = []
    for it in range(total):
        f = F[it]
        b = B[it]
        cf = np.cumsum(f, axis=1)
        fe = cf + np.maximum(start[:, None], np.maximum.accumulate(pr[None, :] - (cf - f), axis=1))
        fwd_done = fe[:, -1]
        gr = fwd_done[:, None] + np.cumsum(b[:, ::-1], axis=1)[:, ::-1]
        end = gr[:, 0].copy()
        if n == 1 or not math.isfinite(link[it]) and cluster.latency_s == 0 and cluster.per_message_s == 0 and finish is None:
            ready = gr.max(axis=0)[plan.last_tensor]
            release = ready
            done = ready.copy()
        else:
            ready = gr.max(axis=0)[plan.last_tensor]
            release, done = _comm(
                plan, credit, ready, ps=ps, n=n, link_Bps=float(link[it]), overhead_s=overhead, delay_s=delay, between_s=between,
                contention=cluster.contention, big=big, extra_delay_s=extra, finish_s=finish,
            )
        tdone = np.full(L, -np.inf)
        np.maximum.at(tdone, plan.seg_tensor, done[plan.seg_msg])
        new_pr = tdone + update
        recs.append(_IterRecord(start, fe, f, b, gr, release, done, new_pr, end, float(link[it])))
        pr = new_pr
        start = end

    rep = recs[warmup_iters:]
    wit = np.stack([r.end - r.start for r in rep])  # (n_iters, n)
    comp = np.array([float((F[i].sum() + B[i].sum()) / n) for i in range(warmup_iters, total)])
    sps = float((model.batch_size * n_iters / wit.sum(axis=0)).sum())
    return SimResult(
        model=model,
        cluster=cluster,
        config=config,
        iter_time_s=wit.mean(axis=1),
        worker_iter_time_s=wit,
        samples_per_s=sps,
        compute_s=comp,
        n_messages=plan.n_real,
        _records=rep,
        _plan=plan,
    )


def evaluate_configs(
    model: ModelProfile,
    cluster: Cluster,
    configs: Sequence[Config] | SearchSpace,
    n_iters: int = 10,
    seed: int = 0,
    traces: Sequence[Trace] | Trace | None = None,
    *,
    start_iter: int = 0,
) -> np.ndarray:
    """Cluster samples/s of every configuration in the same conditions (the
    grid-search oracle): same traces, same jitter draws, same window.

    Returns:
        ``(len(configs),)`` float64 array.
    """
    cfgs = list(configs)
    if not cfgs:
        raise ValueError("configs must hold at least one Config, but got none.")
    return np.array(
        [simulate(model, cluster, c, n_iters=n_iters, seed=seed, traces=traces, start_iter=start_iter).samples_per_s for c in cfgs]
    )
