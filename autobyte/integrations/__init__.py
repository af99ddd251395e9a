"""autobyte.integrations."""
