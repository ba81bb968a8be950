"""The floor every wing stands on, and nothing domain-specific: the error base class
(`errors`), the strict readers of JSON and TOML documents (`json`, `toml`), the rules for
text that leaves (`text`), and what every command line shares (`cli`)."""
