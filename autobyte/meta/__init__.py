"""autobyte.meta."""
