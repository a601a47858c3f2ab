"""GEMM: C = act(alpha * op(A) @ op(B) + beta * C + bias), one module per decision.

- ``dtypes``: the dtype tables and epilogues; ``problem``: the problem constructors;
  ``operands``: the caller's arrays read and checked; ``rules``: layout, alignment and
  aliasing rules (self-contained: exported packages carry a copy).
- ``simt``, ``mma``, ``wgmma``: the families (CUDA cores; mma.sync; Hopper wgmma with TMA),
  ``tc`` what the tensor-core ones share, ``*_geometry`` what their spaces and the cost model
  both read, ``family`` what every GEMM family answers alike (its problem fields and
  request, the cost model's pick, cuBLAS as a candidate).
- ``cost``: the cost model for untuned problems; ``route``: which family runs a request;
  ``staging``: padded copies of operands TMA cannot read; ``vendor``: cuBLAS as a candidate.

The user-facing ``kgen.gemm`` is ``kgen.ops.gemm``, a layer above dispatch.
"""
