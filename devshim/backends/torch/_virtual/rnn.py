"""GPU-only fused RNN kernels, run as the same math on host tensors.

torch's composite code picks fused kernels that exist for GPUs only (CUDA, and
out-of-tree devices like this one) and not for the CPU. Each is run here as the same
math on host tensors; a forward and its backward agree on the workspace they share.
`HOST_KERNELS` maps each ATen operator to its host implementation.
"""

from __future__ import annotations

import torch

__all__ = ["HOST_KERNELS"]

_aten = torch.ops.aten



def _fused_lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    gates = input_gates + input_bias if input_bias is not None else input_gates
    hidden = hidden_gates + hidden_bias if hidden_bias is not None else hidden_gates
    gates = gates + hidden  # summed as the CPU's LSTM cell sums them
    ingate, forgetgate, cellgate, outgate = gates.chunk(4, 1)
    ingate, forgetgate, outgate = ingate.sigmoid(), forgetgate.sigmoid(), outgate.sigmoid()
    cellgate = cellgate.tanh()
    cy = forgetgate * cx + ingate * cellgate
    hy = outgate * cy.tanh()
    workspace = torch.cat([ingate, forgetgate, cellgate, outgate], 1)
    return hy, cy, workspace


def _fused_lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    ingate, forgetgate, cellgate, outgate = workspace.chunk(4, 1)
    grad_hy = torch.zeros_like(cy) if grad_hy is None else grad_hy
    grad_cy = torch.zeros_like(cy) if grad_cy is None else grad_cy
    tanh_cy = cy.tanh()
    grad_outgate = grad_hy * tanh_cy * outgate * (1 - outgate)
    grad_c = grad_hy * outgate * (1 - tanh_cy * tanh_cy) + grad_cy
    grad_ingate = grad_c * cellgate * ingate * (1 - ingate)
    grad_forgetgate = grad_c * cx * forgetgate * (1 - forgetgate)
    grad_cellgate = grad_c * ingate * (1 - cellgate * cellgate)
    grad_gates = torch.cat([grad_ingate, grad_forgetgate, grad_cellgate, grad_outgate], 1)
    grad_bias = grad_gates.sum(0) if has_bias else None
    return grad_gates, grad_c * forgetgate, grad_bias


def _fused_gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    gates = input_gates + input_bias if input_bias is not None else input_gates
    hidden = hidden_gates + hidden_bias if hidden_bias is not None else hidden_gates
    i_r, i_i, i_n = gates.chunk(3, 1)
    h_r, h_i, h_n = hidden.chunk(3, 1)
    resetgate = (i_r + h_r).sigmoid()
    inputgate = (i_i + h_i).sigmoid()
    newgate = (i_n + resetgate * h_n).tanh()
    hy = (hx - newgate) * inputgate + newgate
    workspace = torch.cat([resetgate, inputgate, newgate, hx, h_n], 1)
    return hy, workspace


def _fused_gru_cell_backward(grad_hy, workspace, has_bias):
    resetgate, inputgate, newgate, hx, h_n = workspace.chunk(5, 1)
    grad_inputgate = grad_hy * (hx - newgate) * inputgate * (1 - inputgate)
    grad_hx = grad_hy * inputgate
    grad_in = grad_hy * (1 - inputgate) * (1 - newgate * newgate)
    grad_hn = grad_in * resetgate
    grad_resetgate = grad_in * h_n * resetgate * (1 - resetgate)
    grad_input_gates = torch.cat([grad_resetgate, grad_inputgate, grad_in], 1)
    grad_hidden_gates = torch.cat([grad_resetgate, grad_inputgate, grad_hn], 1)
    if not has_bias:
        return grad_input_gates, grad_hidden_gates, grad_hx, None, None
    return (grad_input_gates, grad_hidden_gates, grad_hx,
            grad_input_gates.sum(0), grad_hidden_gates.sum(0))


HOST_KERNELS = {
    _aten._thnn_fused_lstm_cell.default: _fused_lstm_cell,
    _aten._thnn_fused_lstm_cell_backward_impl.default: _fused_lstm_cell_backward,
    _aten._thnn_fused_gru_cell.default: _fused_gru_cell,
    _aten._thnn_fused_gru_cell_backward.default: _fused_gru_cell_backward,
}

