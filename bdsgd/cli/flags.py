"""The ``bdsgd`` command's flags, checked as argparse reads them: the typed converters every flag
with a range uses (their one home), and the parser whose errors are the project's one line
``bdsgd: error: FLAG: VALUE: MESSAGE`` with exit status 2 (``--help`` is argparse's own).

A converter refuses a value with ``argparse.ArgumentTypeError("VALUE: why")``; argparse adds the
flag's name, and ``Parser.error`` turns that (and argparse's own complaints: a missing or unknown
flag, a choice not offered) into the one line.
"""

from __future__ import annotations

import argparse
import math
import re
import sys

SEED_MAX = 2**64 - 1  # the largest seed torch takes


class FlagError(SystemExit):
    """A flag refused while parsing (its line already on stderr): exit status 2."""

    def __init__(self):
        super().__init__(2)


def _refuse(text: str, why: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"{text}: {why}")


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise _refuse(text, "not a whole number") from None


def _float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _refuse(text, "not a number") from None
    if not math.isfinite(value):
        raise _refuse(text, "not a finite number")
    return value


def positive_int(text: str) -> int:
    """A count: 1 or more."""
    if (value := _int(text)) < 1:
        raise _refuse(text, "must be at least 1")
    return value


def non_negative_int(text: str) -> int:
    """An index: 0 or more."""
    if (value := _int(text)) < 0:
        raise _refuse(text, "must be at least 0")
    return value


def seed(text: str) -> int:
    """A seed: 0 .. 2^64 - 1."""
    if not 0 <= (value := _int(text)) <= SEED_MAX:
        raise _refuse(text, f"a seed is a whole number from 0 to {SEED_MAX}")
    return value


def non_negative_float(text: str) -> float:
    """A duration that may be zero."""
    if (value := _float(text)) < 0:
        raise _refuse(text, "must be at least 0")
    return value


def positive_float(text: str) -> float:
    """A duration or a factor: more than 0."""
    if (value := _float(text)) <= 0:
        raise _refuse(text, "must be greater than 0")
    return value


def fraction(text: str) -> float:
    """A fraction strictly between 0 and 1."""
    if not 0 < (value := _float(text)) < 1:
        raise _refuse(text, "must be strictly between 0 and 1")
    return value


def worker_pair(name: str, convert):
    """A converter of ``WORKER:<name>`` (WORKER 0-based; the value through ``convert``)."""
    def pair(text: str) -> tuple[int, float | int]:
        worker, sep, value = text.partition(":")
        if not sep or not worker or not value:
            raise _refuse(text, f"expected WORKER:{name}")
        parsed = []
        for part, label, check in ((worker, "WORKER", non_negative_int), (value, name, convert)):
            try:
                parsed.append(check(part))
            except argparse.ArgumentTypeError as exc:  # "PART: why"
                raise _refuse(text, f"{label} {str(exc)[len(part) + 2:]}") from None
        return tuple(parsed)

    pair.__name__ = f"WORKER:{name}"
    return pair


def _unquote(text: str) -> str:
    return text[1:-1] if len(text) > 1 and text[0] == text[-1] and text[0] in "'\"" else text


class Parser(argparse.ArgumentParser):
    """An ArgumentParser (its subcommands' too) whose errors are one line and exit status 2."""

    def error(self, message: str):
        print(f"bdsgd: error: {self._one_line(message)}", file=sys.stderr, flush=True)
        raise FlagError()

    def _one_line(self, message: str) -> str:
        """argparse's message as FLAG: VALUE: MESSAGE (VALUE '-' where there is none)."""
        see = f"see '{self.prog} --help'"
        if m := re.fullmatch(r"argument (\S+): (.*)", message, re.S):
            flag, rest = m.groups()
            if c := re.fullmatch(r"invalid choice: (.*?) \(choose from (.*)\)", rest, re.S):
                return f"{flag}: {_unquote(c[1])}: not one of {c[2]}"
            if c := re.fullmatch(r"invalid (.+?) value: (.*)", rest, re.S):
                return f"{flag}: {_unquote(c[2])}: not a valid {c[1]}"
            if c := re.fullmatch(r"ignored explicit argument (.*)", rest, re.S):
                return f"{flag}: {_unquote(c[1])}: this flag takes no value"
            if rest.startswith("expected "):
                return f"{flag}: -: {rest}"
            return f"{flag}: {rest}"  # a converter's VALUE: MESSAGE
        if m := re.fullmatch(r"the following arguments are required: (.*)", message, re.S):
            first, *more = m[1].split(", ")
            also = f" (also missing: {', '.join(more)})" if more else ""
            return f"{first}: -: required{also}; {see}"
        if m := re.fullmatch(r"unrecognized arguments: (.*)", message, re.S):
            first, *more = m[1].split(" ")
            also = f" (and {' '.join(more)})" if more else ""
            return f"{first}: -: unrecognized argument{also}; {see}"
        if m := re.fullmatch(r"ambiguous option: (\S+) could match (.*)", message, re.S):
            return f"{m[1]}: -: ambiguous: could be {m[2]}"
        return f"{self.prog}: -: {' '.join(message.split())}"
