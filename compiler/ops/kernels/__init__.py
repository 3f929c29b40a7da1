"""Loop nests of the heavy operators (the `kernel=` of their OpDefs, see compiler/tir/compute.py).

`gemm` is the register-blocked matrix product behind dense, matmul, batch_matmul and conv2d;
`conv2d`, `pool` and `softmax` build the loops of their operators. The op blocks in
compiler/ops read their attributes and call these builders with plain numbers and loaders, so
nothing here imports an op family module.
"""
