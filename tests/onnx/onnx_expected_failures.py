"""The in-scope ONNX node cases that fail, each with its reason (the first line of what
goes wrong). test_node_suite.py requires each of them to still fail, so that a case that
starts to pass is noticed: remove it from here then. Regenerate the reasons with
`python tests/onnx/onnx_node_suite.py cpu:0`."""
from __future__ import annotations

#: case -> reason, on every backend
EXPECTED: dict[str, str] = {
    "test_attention_3d_causal_bf16": "Attention in bfloat16: one bfloat16 ulp from the reference in places (rtol 1e-3 is below a bf16 ulp)",
    "test_attention_3d_causal_bf16_expanded": "Attention in bfloat16: one bfloat16 ulp from the reference in places (rtol 1e-3 is below a bf16 ulp)",
    "test_attention_4d_causal_bf16": "Attention in bfloat16: one bfloat16 ulp from the reference in places (rtol 1e-3 is below a bf16 ulp)",
    "test_attention_4d_causal_bf16_expanded": "Attention in bfloat16: one bfloat16 ulp from the reference in places (rtol 1e-3 is below a bf16 ulp)",
    "test_attention_4d_causal_padded_kv_bf16": "Attention in bfloat16: one bfloat16 ulp from the reference in places (rtol 1e-3 is below a bf16 ulp)",
    "test_attention_4d_causal_padded_kv_bf16_expanded": "Attention in bfloat16: one bfloat16 ulp from the reference in places (rtol 1e-3 is below a bf16 ulp)",
    "test_attention_4d_padded_kv_bf16": "Attention in bfloat16: one bfloat16 ulp from the reference in places (rtol 1e-3 is below a bf16 ulp)",
    "test_attention_4d_padded_kv_bf16_expanded": "Attention in bfloat16: one bfloat16 ulp from the reference in places (rtol 1e-3 is below a bf16 ulp)",
    "test_basic_deform_conv_with_padding": "DeformConv: unsupported op",
    "test_basic_deform_conv_without_padding": "DeformConv: unsupported op",
    "test_batchnorm_epsilon_training_mode": "BatchNormalization: attribute training_mode=1 is not supported (supported: [0])",
    "test_batchnorm_example_training_mode": "BatchNormalization: attribute training_mode=1 is not supported (supported: [0])",
    "test_deform_conv_with_mask_bias": "DeformConv: unsupported op",
    "test_deform_conv_with_multiple_offset_groups": "DeformConv: unsupported op",
    "test_einsum_batch_diagonal": "Einsum: a repeated subscript (a diagonal, ...ii->...i) is not supported by axle.numpy.einsum",
    "test_lstm_with_peepholes": "LSTM: sequence_lens shorter than the sequence are not supported",
    "test_maxpool_with_argmax_2d_precomputed_pads": "MaxPool: the Indices output of MaxPool is not supported",
    "test_maxpool_with_argmax_2d_precomputed_strides": "MaxPool: attribute storage_order=1 is not supported (supported: [0])",
    "test_maxunpool_export_with_output_shape": "MaxUnpool: unsupported op",
    "test_maxunpool_export_without_output_shape": "MaxUnpool: unsupported op",
    "test_range_bfloat16_type_positive_delta_expanded": "Loop: scan outputs need a constant trip count and a loop condition that stays true",
    "test_range_float16_type_positive_delta_expanded": "Loop: scan outputs need a constant trip count and a loop condition that stays true",
    "test_range_float_type_positive_delta_expanded": "Loop: scan outputs need a constant trip count and a loop condition that stays true",
    "test_range_int32_type_negative_delta_expanded": "Loop: scan outputs need a constant trip count and a loop condition that stays true",
    "test_roialign_aligned_false": "RoiAlign: unsupported op",
    "test_roialign_aligned_true": "RoiAlign: unsupported op",
    "test_roialign_mode_max": "RoiAlign: unsupported op",
    "test_scatter_with_axis": "Scatter: unsupported op",
    "test_scatter_without_axis": "Scatter: unsupported op",
    "test_tensorscatter": "TensorScatter: unsupported op",
    "test_tensorscatter_3d": "TensorScatter: unsupported op",
    "test_tensorscatter_circular": "TensorScatter: unsupported op",
    "test_training_dropout": "Dropout: training_mode=True draws a random mask: not supported",
    "test_training_dropout_default": "Dropout: training_mode=True draws a random mask: not supported",
    "test_training_dropout_default_mask": "Dropout: training_mode=True draws a random mask: not supported",
    "test_training_dropout_mask": "Dropout: training_mode=True draws a random mask: not supported",
    "test_training_dropout_zero_ratio": "Dropout: training_mode=True draws a random mask: not supported",
    "test_training_dropout_zero_ratio_mask": "Dropout: training_mode=True draws a random mask: not supported",
    "test_upsample_nearest": "Upsample: unsupported op",
}

#: backend -> case -> reason, failures of one backend only
EXPECTED_ON: dict[str, dict[str, str]] = {}
