"""One exception type for user mistakes; the CLI prints it as one line."""


class ConfigError(ValueError):
    """Bad user input: unknown name, unknown key, wrong type, forbidden mode."""
