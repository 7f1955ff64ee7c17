"""The toolkit's exceptions. Every message states the broken rule, the actual values and the fix."""


class BandwidthError(Exception):
    """Base class: the command line turns it into one line on stderr and a non-zero exit."""

    exit_code = 2


class ConfigError(BandwidthError):
    """Bad input: an unknown name, a malformed value, a device that does not exist."""


class UnsupportedError(BandwidthError):
    """A valid request that this mode or this machine cannot carry out (and why)."""


class OutOfMemoryError(BandwidthError):
    """The arrays do not fit in a device's free memory."""


class WorkerError(BandwidthError):
    """A child process failed; the message names its rank, exit status and last stderr lines."""

    exit_code = 1
