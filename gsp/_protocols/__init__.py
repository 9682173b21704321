"""The built-in protocols, registered through gsp's own entry points like any plugin.
"""
