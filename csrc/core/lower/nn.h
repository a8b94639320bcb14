/* nn.h — the nn family's lowerings, split over nn.c (softmax, dropout,
 * losses, and the family's table), nn_norm.c (layer/batch/group norm),
 * nn_conv.c (convolution, pooling) and nn_attn.c (attention). */
#ifndef TPUC_LOWER_NN_H
#define TPUC_LOWER_NN_H

#include "lower_ops.h"

/* Sets the results of an op with a bool[3] output_mask at argument
 * `mask_arg`: vals[i] for each output asked for. The caller passes either
 * all three outputs (unasked ones get zeros) or only the asked ones, in
 * order. */
tpuc_status *nn_set_masked(tpuc_lower_ctx *cx, int mask_arg, const tv *vals);
/* Whether output i of a bool[3] output_mask at `mask_arg` is asked for. */
bool nn_mask(const tpuc_lower_ctx *cx, int mask_arg, int i);

/* Sets every result to zeros of its type (empty tensors); returns NULL. */
tpuc_status *nn_zeros(tpuc_lower_ctx *cx);

/* Per-channel vector v ([C]) broadcast along dim 1 of type t. */
tv nn_chan(ir_graph *g, tv v, ir_type t);

/* nn_norm.c */
tpuc_status *nn_layer_norm(tpuc_lower_ctx *cx);
tpuc_status *nn_layer_norm_backward(tpuc_lower_ctx *cx);
tpuc_status *nn_batch_norm(tpuc_lower_ctx *cx);
tpuc_status *nn_batch_norm_legit_no_stats(tpuc_lower_ctx *cx);
tpuc_status *nn_batch_norm_no_training(tpuc_lower_ctx *cx);
tpuc_status *nn_batch_norm_with_update(tpuc_lower_ctx *cx);
tpuc_status *nn_batch_norm_no_update(tpuc_lower_ctx *cx);
tpuc_status *nn_batch_norm_backward(tpuc_lower_ctx *cx);
tpuc_status *nn_group_norm(tpuc_lower_ctx *cx);
tpuc_status *nn_group_norm_backward(tpuc_lower_ctx *cx);

/* nn_conv.c */
tpuc_status *nn_convolution(tpuc_lower_ctx *cx);
tpuc_status *nn_convolution_backward(tpuc_lower_ctx *cx);
tpuc_status *nn_convolution_backward_overrideable(tpuc_lower_ctx *cx);
tpuc_status *nn_max_pool2d(tpuc_lower_ctx *cx);
tpuc_status *nn_max_pool2d_backward(tpuc_lower_ctx *cx);
tpuc_status *nn_avg_pool2d(tpuc_lower_ctx *cx);
tpuc_status *nn_avg_pool2d_backward(tpuc_lower_ctx *cx);
tpuc_status *nn_adaptive_avg_pool2d(tpuc_lower_ctx *cx);
tpuc_status *nn_adaptive_avg_pool2d_backward(tpuc_lower_ctx *cx);

/* nn_attn.c */
tpuc_status *nn_sdpa_flash_cpu(tpuc_lower_ctx *cx);
tpuc_status *nn_sdpa_flash_cpu_backward(tpuc_lower_ctx *cx);

#endif /* TPUC_LOWER_NN_H */
