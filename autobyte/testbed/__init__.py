"""autobyte.testbed."""
