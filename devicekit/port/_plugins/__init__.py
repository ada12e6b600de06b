"""The rules of `devicekit port`, one module per idiom (see rule.py for what a rule module
holds, and registry.py for the order they are tried in)."""
