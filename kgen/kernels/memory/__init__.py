"""The memory-bound families: elementwise expressions and casts, reductions, softmax and
RMSNorm, transposes and axis permutations. Their floor is the bytes they move over the
copy rate, so each family's ``bytes`` is exact and every report gives the fraction of the
copy rate reached. They share their element types (``elements``), their base class
(``family.MemoryFamily``) and the vector loads of ``templates/common/vec_io.cuh``."""
