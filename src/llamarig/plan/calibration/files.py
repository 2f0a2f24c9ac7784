"""Which calibration a plan uses, and reading it: the file ``llamarig tune`` wrote
(``$LLAMARIG_STATE_DIR/speed-calibration.json``), one named by ``--calibration`` or
``$LLAMARIG_CALIBRATION``, or the built-in constants; a GPU evidence file
(benchmarks/gpu_evidence.py) is fitted into a calibration as it is read (plan/calibration/least_squares.py).
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

from llamarig.errors import InputError
from llamarig.i18n import _, os_error
from llamarig.paths import state_dir
from llamarig.plan.calibration.constants import Calibration, builtin, calibration_from_json
from llamarig.plan.calibration.least_squares import calibration_from_evidence
from llamarig.plan.calibration.points import is_evidence

#: the file ``llamarig tune`` writes in the state directory; ``plan`` loads it by default
STATE_FILE = "speed-calibration.json"
#: ``LLAMARIG_CALIBRATION``: a file to use, or ``builtin`` to ignore the state-directory file
ENV = "LLAMARIG_CALIBRATION"
BUILTIN_NAMES = ("builtin", "built-in")


def state_calibration_path() -> Path:
    """``$LLAMARIG_STATE_DIR/speed-calibration.json`` (or the XDG state dir), where tune writes."""
    return state_dir() / STATE_FILE


def load_calibration(path: str | Path | None = None) -> Calibration:
    """The calibration the speed model uses.

    ``path`` given: the built-in constants overridden by that file (``builtin``: the built-in
    constants alone). ``path`` None: ``$LLAMARIG_CALIBRATION`` when set (a file, or ``builtin``),
    else the file ``llamarig tune`` wrote in the state directory when it exists, else the
    built-in constants. The source is in ``Calibration.source`` (plan prints it as
    ``calibration: ...``)."""
    base = builtin()
    how = ""
    if path is None:
        env = os.environ.get(ENV, "").strip()
        if env:
            path, how = env, _(" (from ${env})").format(env=ENV)
        else:
            sp = state_calibration_path()
            if not sp.is_file():
                return base
            path, how = sp, _(" (written by llamarig tune; {env}=builtin or --calibration builtin ignores it)").format(env=ENV)
    if str(path) in BUILTIN_NAMES and not Path(path).exists():
        return base
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise InputError(_("calibration file {path}{how}: not found").format(path=p, how=how)) from None
    except OSError as e:
        raise InputError(_("calibration file {path}{how}: not readable ({error})").format(path=p, how=how, error=os_error(e))) from None
    return _load_file(str(p.resolve()), st.st_mtime_ns, st.st_size, how)


@lru_cache(maxsize=16)
def _load_file(path: str, _mtime_ns: int, _size: int, how: str) -> Calibration:
    """One parsed file (cached on path, modification time and size: the speed model asks for
    the default calibration many times per plan)."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise InputError(_("calibration file {path}{how}: not found").format(path=p, how=how)) from None
    except (OSError, ValueError) as e:
        raise InputError(_("calibration file {path}{how}: not readable JSON ({error})").format(path=p, how=how, error=e)) from None
    if is_evidence(data):
        data = calibration_from_evidence(data, f"GPU evidence file {p}")
    if isinstance(data, dict) and data.get("version", 1) != 1:
        raise InputError(_("calibration file {path}{how}: version {version} is not supported (1)").format(path=p, how=how, version=data.get('version')))
    return calibration_from_json(data, _("calibration file {path}{how}").format(path=p, how=how))
