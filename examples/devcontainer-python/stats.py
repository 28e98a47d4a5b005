"""A tiny module an agent might be asked to extend."""


def mean(values):
    """The arithmetic mean of a non-empty sequence."""
    return sum(values) / len(values)
