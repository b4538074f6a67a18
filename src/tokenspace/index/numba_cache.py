"""A place numba can write its compiled kernels to, found before kernels.py defines them.

numba caches a ``cache=True`` function in NUMBA_CACHE_DIR, else in the __pycache__ beside its source,
else in the user's cache (~/.cache/numba), and refuses to define it at all when none can be written
("cannot cache function 'check_rows': no locator available"): run by a user whose HOME is not writable,
from an install they may not write in, every index command failed at import, with no way forward.
So ``ensure`` asks numba's own locators first (a writable place is used as numba would use it); when
none works it points numba at a folder of this user's in the temporary folder, and when even that
cannot be written it turns caching off (each process then compiles the kernels once, a few seconds).
Either way it logs one warning that says where the cache went and how to choose the place.
"""
from __future__ import annotations

import importlib
import logging
import os
import tempfile
from pathlib import Path

from numba.core import caching, config
from numba.core.dispatcher import Dispatcher

log = logging.getLogger(__name__)


def ensure(py_file: str) -> str:
    """Make the ``cache=True`` kernels of ``py_file`` definable; returns "numba" (numba's own place
    works), "temp" (the temporary folder's) or "off" (no cache)."""
    if any(cls.from_function(ensure, py_file) is not None for cls in _locators()):
        return "numba"
    tried = config.CACHE_DIR or "~/.cache/numba"
    try:
        folder = Path(tempfile.gettempdir()) / f"tokenspace-numba-{os.getuid()}"
        folder.mkdir(mode=0o700, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()  # the mode bits do not tell for root, nor on every file system
    except OSError:  # gettempdir's FileNotFoundError too: no temporary folder can be written
        Dispatcher.enable_caching = lambda self: None  # every dispatcher keeps its no-op cache
        log.warning("numba cannot cache its compiled kernels (%s and the temporary folder are not writable): "
                    "compiling them in each process; set NUMBA_CACHE_DIR to a writable folder to keep them", tried)
        return "off"
    config.CACHE_DIR = str(folder)  # what numba's first locator reads, now and for each function
    config.CACHE_LOCATOR_CLASSES = ""  # a list of places none of which can be written: numba's own order again
    log.warning("numba cannot cache its compiled kernels in %s or beside tokenspace (not writable): caching "
                "them in %s instead; set NUMBA_CACHE_DIR to choose the place", tried, folder)
    return "temp"


def _locators() -> list:
    """The locator classes numba tries, in order: NUMBA_CACHE_LOCATOR_CLASSES's when set (numba's own
    reading of it: a dotted path, or a name in numba.core.caching), else its default list."""
    if not config.CACHE_LOCATOR_CLASSES:
        return list(caching.CacheImpl._locator_classes)
    classes = []
    for name in (n.strip() for n in config.CACHE_LOCATOR_CLASSES.split(",")):
        module, _, cls = name.rpartition(".")
        classes.append(getattr(importlib.import_module(module), cls) if module else getattr(caching, name))
    return classes
