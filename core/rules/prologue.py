"""The shell prologue that turns the DISPATCH_K8S_* values into DISPATCH_EPOCH and _ATTEMPT.

It runs as `/bin/sh -c PROLOGUE dispatch-prologue <user command...>` under whatever POSIX
shell the training image ships (dash, busybox ash, bash, mksh, yash, zsh as sh, ksh93, posh),
so it uses only what all of them do the same way:

- A and J are checked as text with `case` before any arithmetic, so no shell ever sees a
  value it would read as octal, wrap, or fail on with its own message. Digits are listed,
  not ranged: `[0-9]` follows the locale's collation in some shells. A value holding a
  non-digit is not echoed, so the message stays one line whatever it held.
- Only R is computed, from two numbers of at most six digits; the epoch is concatenated
  with `printf '%s%06d'`, never computed, so it cannot overflow a shell's integers.
- Scratch values live in DISPATCH_K8S_* names, which a job's own env may not use (Start
  refuses DISPATCH_* keys), so no variable of the job is overwritten; all are unset.
- The user command reaches `exec` as "$@": no word of it is re-parsed.
"""

from __future__ import annotations

from typing import Final

from dispatch_k8s.core.rules import wire

EXIT_REFUSED: Final = 125  # the value docker and env use for "the wrapper itself failed"

PROLOGUE: Final = r"""
dispatch_fail() { printf 'dispatch: %s\n' "$1" >&2; exit 125; }
dispatch_check() {
  case $2 in
    '') dispatch_fail "$1 is missing or empty" ;;
    *[!0123456789]*) dispatch_fail "$1 holds a non-digit: want a canonical decimal 0..999999" ;;
    0?*|???????*) dispatch_fail "$1 '$2' is not a canonical decimal from 0 to 999999" ;;
  esac
}
dispatch_check DISPATCH_K8S_ADMISSION "${DISPATCH_K8S_ADMISSION-}"
dispatch_check DISPATCH_K8S_RESTART "${DISPATCH_K8S_RESTART-}"
case ${DISPATCH_K8S_EPOCH_PREFIX-} in
  ''|*[!0123456789]*|0*) dispatch_fail "DISPATCH_K8S_EPOCH_PREFIX is not a positive decimal" ;;
esac
case ${DISPATCH_K8S_TOKEN_PREFIX-} in
  '') dispatch_fail "DISPATCH_K8S_TOKEN_PREFIX is missing or empty" ;;
esac
DISPATCH_K8S_R=$(($DISPATCH_K8S_ADMISSION + $DISPATCH_K8S_RESTART))
case $DISPATCH_K8S_R in
  ???????*) dispatch_fail "R = A + J = $DISPATCH_K8S_ADMISSION + $DISPATCH_K8S_RESTART \
= $DISPATCH_K8S_R must be below 1000000" ;;
esac
if [ -n "${DISPATCH_K8S_WORKDIR-}" ]; then
  case $DISPATCH_K8S_WORKDIR in
    /*) ;;
    *) dispatch_fail "work dir '$DISPATCH_K8S_WORKDIR' is not an absolute path" ;;
  esac
  cd "$DISPATCH_K8S_WORKDIR" 2>/dev/null ||
    dispatch_fail "cannot enter work dir '$DISPATCH_K8S_WORKDIR'"
fi
[ "$#" -gt 0 ] || dispatch_fail "no command to run"
case $1 in
  -*) dispatch_fail "the command must not start with '-': shells disagree on exec options" ;;
esac
DISPATCH_EPOCH=$(printf '%s%06d' "$DISPATCH_K8S_EPOCH_PREFIX" "$DISPATCH_K8S_R") ||
  dispatch_fail "cannot format the epoch"
DISPATCH_ATTEMPT=$DISPATCH_K8S_TOKEN_PREFIX.$DISPATCH_K8S_ADMISSION.$DISPATCH_K8S_RESTART
export DISPATCH_EPOCH DISPATCH_ATTEMPT
unset DISPATCH_K8S_ADMISSION DISPATCH_K8S_RESTART DISPATCH_K8S_EPOCH_PREFIX
unset DISPATCH_K8S_TOKEN_PREFIX DISPATCH_K8S_WORKDIR DISPATCH_K8S_R
unset -f dispatch_fail dispatch_check
exec "$@"
""".lstrip()


def wrap_command(user_command: list[str]) -> list[str]:
    """The TrainJob's `spec.trainer.command`: the prologue, then the user command as $@."""
    return ["/bin/sh", "-c", PROLOGUE, wire.PROLOGUE_NAME, *user_command]
