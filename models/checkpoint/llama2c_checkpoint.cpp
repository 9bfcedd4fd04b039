// llama2.c legacy checkpoint reader (see llama2c_checkpoint.h for the layout).
#include "models/checkpoint/llama2c_checkpoint.h"

#include <ATen/ATen.h>

#include <cstring>

#include "base/error.h"
#include "base/mapped_file.h"
#include "models/checkpoint/llama2c_header.h"
#include "models/tensor_util.h"

namespace specbed {

LlamaConfig ReadLlama2cConfig(const std::string& path) {
  auto file = MappedFile::Open(path);
  return ParseLlama2cHeader(file->data(), file->size(), path);
}

Llama2cCheckpoint ReadLlama2cCheckpoint(const std::string& path) {
  auto file = MappedFile::Open(path);
  const LlamaConfig config = ParseLlama2cHeader(file->data(), file->size(), path);
  const int64_t dim = config.dim, hidden = config.hidden_dim, n_layers = config.n_layers,
                vocab = config.vocab_size, seq_len = config.max_seq_len;
  const bool shared_classifier = config.tie_embeddings;
  const int64_t kv_dim = config.kv_dim();
  const int64_t head_size = config.head_dim;
  const int64_t expected_floats =
      vocab * dim + n_layers * (2 * dim + dim * dim * 2 + 2 * kv_dim * dim + 3 * dim * hidden) +
      dim + seq_len * head_size + (shared_classifier ? 0 : vocab * dim);
  const int64_t expected_bytes = 28 + expected_floats * 4;
  SPECBED_CHECK(static_cast<int64_t>(file->size()) == expected_bytes, "llama2.c checkpoint '", path,
                "' is ", file->size(), " bytes but its header (dim=", dim, ", n_layers=", n_layers,
                ", vocab=", vocab, ", ...) implies ", expected_bytes,
                " bytes (truncated or corrupt)");

  const float* p = reinterpret_cast<const float*>(file->data() + 28);
  auto take = [&](std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    at::Tensor t = at::from_blob(const_cast<float*>(p), shape, at::kFloat).clone();
    p += n;
    return t;
  };
  auto per_layer = [&](std::vector<int64_t> shape) {
    std::vector<int64_t> full = {n_layers};
    full.insert(full.end(), shape.begin(), shape.end());
    return take(full);
  };
  Llama2cCheckpoint out;
  auto& t = out.tensors;
  t["model.embed_tokens.weight"] = take({vocab, dim});
  const std::string L = "model.layers.";
  auto split = [&](const at::Tensor& all, const std::string& name) {
    for (int64_t l = 0; l < n_layers; ++l) t[L + std::to_string(l) + "." + name] = all[l].clone();
  };
  split(per_layer({dim}), "input_layernorm.weight");
  split(per_layer({dim, dim}), "self_attn.q_proj.weight");
  split(per_layer({kv_dim, dim}), "self_attn.k_proj.weight");
  split(per_layer({kv_dim, dim}), "self_attn.v_proj.weight");
  split(per_layer({dim, dim}), "self_attn.o_proj.weight");
  split(per_layer({dim}), "post_attention_layernorm.weight");
  split(per_layer({hidden, dim}), "mlp.gate_proj.weight");  // w1
  split(per_layer({dim, hidden}), "mlp.down_proj.weight");  // w2
  split(per_layer({hidden, dim}), "mlp.up_proj.weight");    // w3
  t["model.norm.weight"] = take({dim});
  p += seq_len * head_size;  // freq_cis_real and freq_cis_imag: recomputed from rope_theta
  if (!shared_classifier) t["lm_head.weight"] = take({vocab, dim});
  for (const auto& [name, tensor] : t) {
    CheckFiniteWeights(tensor, name, "llama2.c checkpoint '" + path + "'");
  }
  out.config = config;
  return out;
}

}  // namespace specbed
