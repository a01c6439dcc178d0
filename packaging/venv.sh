# SPDX-License-Identifier: Apache-2.0
# Sourced by ./dev and packaging/install.sh (each defines log): the venv rule
# both follow.

# fresh_venv PY VENV: VENV exists and was made by PY. A venv another
# interpreter made (another --python, a python3 that changed) is made again:
# its scripts and compiled packages belong to the interpreter that made it.
fresh_venv() {
  local py=$1 venv=$2 want have
  want=$("$py" -c 'import os, sys; print(os.path.realpath(sys.executable))')
  have=$(sed -n 's/^executable = //p' "$venv/pyvenv.cfg" 2>/dev/null || true)
  if [ -x "$venv/bin/python" ] && [ "$have" != "$want" ]; then
    log "venv $venv was made by ${have:-another interpreter}, not $want: making it again"
    rm -rf "$venv"
  fi
  if [ ! -x "$venv/bin/python" ]; then
    log "creating venv $venv"
    "$py" -m venv "$venv"
  fi
}
