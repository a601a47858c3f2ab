"""Loading an exported package's kernels: the cubin where the GPU is the arch it was built for,
else the PTX (which newer GPUs compile at load), once per device. Depends on CuPy, loaded on
first use; ``kgen export`` copies this file into every package as ``_loader.py``."""

import os

_FUNCTIONS = {}


def kernel(folder, arch, name, shared_mem=0):
    """The CuPy function ``name`` of ``folder``/kernels, on the current device, allowed
    ``shared_mem`` bytes of dynamic shared memory."""
    import cupy

    device = cupy.cuda.Device()
    fn = _FUNCTIONS.get((folder, device.id, name))
    if fn is None:
        kind = "cubin" if "sm_" + device.compute_capability == arch else "ptx"
        fn = cupy.RawModule(path=os.path.join(folder, "kernels", f"{name}.{kind}")).get_function(name)
        _FUNCTIONS[(folder, device.id, name)] = fn
    if shared_mem > 48 * 1024 and fn.max_dynamic_shared_size_bytes < shared_mem:
        fn.max_dynamic_shared_size_bytes = shared_mem
    return fn
