"""Loading an exported package's kernels: the cubin where the GPU is the arch it was built for,
else the PTX (which newer GPUs compile at load), once per device. Depends on CuPy, loaded on
first use; ``kgen export`` copies this file into every package as ``_loader.py``."""

import os

_FUNCTIONS = {}


def kernel(folder, arch, name, shared_mem=0, entry=None):
    """The CuPy function ``entry`` (default ``name``) of the kernel files ``name`` in
    ``folder``/kernels, on the current device, allowed ``shared_mem`` bytes of dynamic shared
    memory."""
    import cupy

    device = cupy.cuda.Device()
    key = (folder, device.id, name)
    loaded = _FUNCTIONS.get(key)
    if loaded is None:
        kind = "cubin" if "sm_" + device.compute_capability == arch else "ptx"
        fn = cupy.RawModule(path=os.path.join(folder, "kernels", f"{name}.{kind}")).get_function(entry or name)
        # [function, dynamic shared bytes allowed]: 48 KiB less its static shared memory until opted in
        loaded = _FUNCTIONS[key] = [fn, 48 * 1024 - int(fn.shared_size_bytes)]
    fn = loaded[0]
    if shared_mem > loaded[1]:
        fn.max_dynamic_shared_size_bytes = shared_mem
        loaded[1] = shared_mem
    return fn
