// Where a trainable model's parameters live: moving a NamedParams list to a device (each parameter
// stays a float32 leaf with its requires_grad, values copied exactly) and taking host copies of
// tensors for checkpoints and written drafters. Every trainable class (TrainableLlama::To,
// TrainableEagle3::To, TrainableDflash::To, ...) places itself with MoveParamsTo; trainers write
// drafters and train states through ToHost, so a CPU run keeps its tensors (no copy) and a
// device run crosses to the host once per write.
// Checked by: tests/train/train_loop_test.cpp (ParamDeviceTest: moves keep leaves, nothing is
// copied on the CPU; TrainLoopCuda: a run on cuda and across devices), tests/train/train_test.cpp
// (TrainableLlama::To).
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <string>

#include "methods/common/named_params.h"
#include "models/device.h"

namespace specbed {

// `t` on the host (CPU), detached: `t` itself when it is there (no copy), else one
// device-to-host copy.
inline at::Tensor ToHost(const at::Tensor& t) {
  return t.is_cpu() ? t.detach() : t.detach().to(at::kCPU);
}

// ToHost of every tensor of a checkpoint map (what a trainer writes with safetensors).
inline std::map<std::string, at::Tensor> ToHost(std::map<std::string, at::Tensor> tensors) {
  for (auto& [name, t] : tensors) {
    if (t.defined()) t = ToHost(t);
  }
  return tensors;
}

// Moves every parameter to `device`: a parameter already there is kept (the same tensor, so a
// CPU-to-CPU move copies nothing); any other becomes a new leaf on `device` with the same values,
// dtype and requires_grad (its gradient is dropped). Anything holding the old tensors (an
// optimiser) must be built after the move.
inline void MoveParamsTo(NamedParams& params, const at::Device& device) {
  for (auto& [name, p] : params) {
    if (SameDevice(p.device(), device)) continue;
    const bool grad = p.requires_grad();
    at::Tensor moved = p.detach().to(device).contiguous();
    if (grad) moved.set_requires_grad(true);
    p = moved;
  }
}

// A constant (non-parameter) tensor on `device` (the same tensor when it is there already).
inline at::Tensor OnDevice(const at::Tensor& t, const at::Device& device) {
  return t.defined() ? t.to(device) : t;
}

}  // namespace specbed
