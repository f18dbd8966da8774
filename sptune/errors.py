"""One exception type for mistakes a user can fix: the CLI prints it on one line and exits 2."""


class UserError(Exception):
    """A bad config value, unknown name or missing data: the message names the problem and the fix."""
