"""How the engine's code is compiled (numba, ``cache=True``): imported first by every compiled module.

Importing it runs :func:`core_env.compiled_cache.guard` before anything compiles, so cached machine code
built from other rule sources is dropped. Compiled with ``error_model="numpy"``: a float division by zero
gives inf or nan as in numpy (a loss of 0, a target equal to the first loss), never an exception mid-step.
"""

from __future__ import annotations

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

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


@intrinsic
def prefetch(typingctx, array, index):
    """``prefetch(array, i)`` in compiled code: a hint that ``array[i]`` (of a 1-d array; of a C-contiguous
    array of more dimensions, its row i) will be read soon, so the CPU starts loading its cache line now
    (LLVM's ``llvm.prefetch``: no read happens, a bad address cannot fault and no value changes). The step
    uses it where it would otherwise wait on memory it reads at random (:func:`core_env.dynamics.prefetch_step`)."""
    if not isinstance(array, types.Array) or not isinstance(index, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        view = context.make_array(array_type)(context, builder, args[0])
        first = context.cast(builder, args[1], signature.args[1], types.intp)
        indices = [first] + [context.get_constant(types.intp, 0)] * (array_type.ndim - 1)
        pointer = cgutils.get_item_pointer2(context, builder, view.data, cgutils.unpack_tuple(builder, view.shape, array_type.ndim),
                                            cgutils.unpack_tuple(builder, view.strides, array_type.ndim), array_type.layout, indices,
                                            wraparound=False)
        byte_pointer = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        hint = builder.module.declare_intrinsic("llvm.prefetch", [byte_pointer], ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32]))
        # read (0), keep in every cache level (locality 3), data cache (1)
        builder.call(hint, [builder.bitcast(pointer, byte_pointer), ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.none(array, index), codegen
