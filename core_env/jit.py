"""How the engine's code is compiled (numba, ``cache=True``): imported first by every compiled module.

Importing it runs :func:`core_env.compiled_cache.guard` before anything compiles, so cached machine code
built from other rule sources is dropped. Compiled with ``error_model="numpy"``: a float division by zero
gives inf or nan as in numpy (a loss of 0, a target equal to the first loss), never an exception mid-step.
"""

from __future__ import annotations

from numba import njit

from core_env import compiled_cache

compiled_cache.guard()

#: A compiled function called from Python (or from other compiled code as a call).
compiled = njit(cache=True, error_model="numpy")
#: The rules called per environment inside a step's loop are inlined into it (numba IR level): a compiled
#: call with array arguments updates their reference counts with atomic instructions on entry and exit,
#: which cost a third of a B = 256 step when each rule was a call per environment.
inlined = njit(cache=True, error_model="numpy", inline="always")
#: The loops over environments allocate nothing and take every array from their caller, so they are
#: compiled without reference counting at all (numba's ``_nrt=False``): the arrays they index stay owned by
#: the caller for the whole call.
unowned = njit(cache=True, error_model="numpy", _nrt=False)
