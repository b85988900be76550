"""Sparse convolution as data and arithmetic: the machinery of mmpar's spconv faces.

mmcv 1.7.2's sparse convolution (``sparse_conv``, ``sparse_ops``, ``sparse_functional``,
``sparse_pool``, after spconv 1.x) pairs input and output sites per kernel offset
(the "rulebook", mmcv's ``indice_pairs``) and then, per offset, gathers input rows,
multiplies them by that offset's ``(C_in, C_out)`` weight slice and adds them into
the output rows. Here the two halves are apart, as in spconv 2.x:

* :mod:`.coords`: sites as integer keys ``(batch, *spatial)`` in row-major order,
  and the check of indices against ``spatial_shape`` and
  ``batch_size``;
* :mod:`.rulebook`: :class:`~.rulebook.Rulebook`, the pairs of every offset in
  compact form, found by sorting keys and ``searchsorted`` (never a dense grid of
  the spatial shape), for submanifold, strided and transposed convolutions;
* :mod:`.layout`: a rulebook to and from mmcv's ``(indice_pairs, indice_pair_num)``;
* :mod:`.operands`: the kernels' arguments checked and turned into a weight and a
  rulebook;
* :mod:`.arithmetic`: the gather-matmul-scatter of a convolution and its
  gradients, and the max pooling over a rulebook with mmcv's gradient.
"""
