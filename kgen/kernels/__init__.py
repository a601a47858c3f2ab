"""The kernel families shipped with kgen, named as ``module:class`` (loaded on first use by
``kgen.registry``, as a user's families are through the ``kgen.families`` entry points)."""

BUILTIN_FAMILIES = {
    "gemm": "kgen.kernels.gemm.simt:GemmSimt",
    "gemm_mma": "kgen.kernels.gemm.mma:GemmMma",
    "gemm_wgmma": "kgen.kernels.gemm.wgmma:GemmWgmma",
    "gemm_skinny": "kgen.kernels.gemm.skinny:GemmSkinny",
    "gemm_batched": "kgen.kernels.gemm.batched:GemmBatched",
    "gemm_batched_wgmma": "kgen.kernels.gemm.batched_wgmma:GemmBatchedWgmma",
    "gemm_grouped": "kgen.kernels.gemm.grouped:GemmGrouped",
    "gemm_grouped_wgmma": "kgen.kernels.gemm.grouped_wgmma:GemmGroupedWgmma",
    "gemm_kgrouped": "kgen.kernels.gemm.kgrouped:GemmKGrouped",
    "gemm_kgrouped_wgmma": "kgen.kernels.gemm.kgrouped_wgmma:GemmKGroupedWgmma",
    "elementwise": "kgen.kernels.memory.elementwise:Elementwise",
    "cast": "kgen.kernels.memory.cast:Cast",
    "reduce": "kgen.kernels.memory.reduce:Reduce",
    "permute": "kgen.kernels.memory.permute:Permute",
    "softmax": "kgen.kernels.memory.rownorm:Softmax",
    "rmsnorm": "kgen.kernels.memory.rownorm:RmsNorm",
    "conv2d": "kgen.kernels.conv.conv2d:Conv2d",
    "conv2d_wgmma": "kgen.kernels.conv.conv2d_wgmma:Conv2dWgmma",
    "conv2d_wgrad_wgmma": "kgen.kernels.conv.conv2d_wgrad_wgmma:Conv2dWgradWgmma",
    "conv2d_simt": "kgen.kernels.conv.conv2d_simt:Conv2dSimt",
    "conv2d_winograd": "kgen.kernels.conv.conv2d_winograd:Conv2dWinograd",
    "conv2d_depthwise": "kgen.kernels.conv.depthwise:DepthwiseConv2d",
    "dist_gemm": "kgen.dist.tuning:DistGemm",
}
