"""The operations users call (``kgen.gemm`` ...): a layer above dispatch, below nothing."""
