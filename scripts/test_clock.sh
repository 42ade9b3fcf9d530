#!/usr/bin/env bash
# make test-clock: the pure tiers run as if today were later, under Debian's faketime (libfaketime, LD_PRELOAD):
#   scripts/test_clock.sh            offsets +365d and +1095d; tests/unit and tests/operator/unit
# TEST_CLOCK_OFFSETS="+30d" and TEST_CLOCK_PATHS="tests/integration" change them (tests/integration passes at +365d
# too, 1176 tests in 18 min 22 s at load average 9-16: too long for CI). A test that passes today and fails here
# depends on the calendar (a fixture built at a fixed date, checked by code that reads the real clock).
#
# FAKETIME_DONT_FAKE_MONOTONIC=1: only the wall clock moves (ages and timeouts keep the real monotonic clock; faking
# it hangs threading.Event.wait). scripts/test_clock/ goes on PYTHONPATH for every Python process (the session and
# the SCMs and CLIs it starts): its sitecustomize.py replaces time.sleep only where libfaketime 0.9.10 breaks it
# (EINVAL, wolfcw/libfaketime issue 426) and says so before each run. Child processes that are not Python
# (openssl, helm) see the faked date as well; the tests give openssl an explicit -attime.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/apt_install.sh test_clock faketime faketime
offsets=${TEST_CLOCK_OFFSETS:-+365d +1095d}
paths=${TEST_CLOCK_PATHS:-tests/unit tests/operator/unit}
# the same selection as make test's, for the paths above
markers="not soak and not chaos and not container and not kind and not e2e_local and not audit_e2e and not interop \
and not ozone_interop and not monitoring and not control_plane and not browser and not s3"
export FAKETIME_DONT_FAKE_MONOTONIC=1
export PYTHONPATH="$PWD/scripts/test_clock${PYTHONPATH:+:$PYTHONPATH}"

failed=()
for offset in $offsets; do
  start=$(date +%s)
  echo "test-clock: faketime -f $offset: faked date $(faketime -f "$offset" date -u +%Y-%m-%dT%H:%M:%SZ)" \
       "(real $(date -u +%Y-%m-%dT%H:%M:%SZ)); $paths"
  echo "test-clock: $(faketime -f "$offset" .venv/bin/python -c \
       'import os; print(os.environ.get("OZONE_SCM_SLEEP_SHIM") or "time.sleep works under this libfaketime: no shim")')"
  # shellcheck disable=SC2086  # paths is a list
  if faketime -f "$offset" .venv/bin/python -m pytest -p no:cacheprovider $paths -m "$markers" -q; then
    echo "test-clock: $offset passed in $(( $(date +%s) - start )) s"
  else
    echo "test-clock: $offset FAILED in $(( $(date +%s) - start )) s"
    failed+=("$offset")
  fi
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "test-clock: failures at ${failed[*]} (a test or the code depends on today's date)" >&2
  exit 1
fi
