"""One exception type for user mistakes; the CLI prints it as one line."""


class ConfigError(ValueError):
    """Bad user input: unknown name, unknown key, wrong type, forbidden mode."""


class EnvError(ConfigError):
    """An env broke its contract while running (e.g. a non-finite reward); the message
    names the env, the agent and the env step."""


def install_hint(extra: str) -> str:
    """The command that installs an extra, pinned as the README's set-up is."""
    return f'pip install -c constraints.txt -e ".[{extra}]"'
