// llama2.c legacy header parsing (see llama2c_header.h).
#include "models/checkpoint/llama2c_header.h"

#include <cstring>

#include "base/error.h"

namespace specbed {
namespace {

constexpr uint32_t kLlama2cMagic = 0x616b3432;  // "ak42": llama2.c export versions >= 1

}  // namespace

LlamaConfig ParseLlama2cHeader(const uint8_t* data, size_t size, const std::string& path) {
  SPECBED_CHECK(size >= 28, "llama2.c checkpoint '", path, "' is ", size,
                " bytes; expected at least a 28-byte header");
  uint32_t magic = 0;
  std::memcpy(&magic, data, 4);
  SPECBED_CHECK(magic != kLlama2cMagic, "llama2.c checkpoint '", path,
                "' uses a versioned export format (magic ak42); only the legacy format is "
                "supported: re-export with llama2.c's legacy_export");
  int32_t header[7];
  std::memcpy(header, data, sizeof(header));
  const int64_t dim = header[0], hidden = header[1], n_layers = header[2], n_heads = header[3],
                n_kv_heads = header[4], seq_len = header[6];
  const bool shared_classifier = header[5] > 0;
  const int64_t vocab = header[5] > 0 ? header[5] : -static_cast<int64_t>(header[5]);
  const auto sane = [](int64_t v, int64_t hi) { return v > 0 && v <= hi; };
  SPECBED_CHECK(sane(dim, 1 << 16) && sane(hidden, 1 << 18) && sane(n_layers, 1024) &&
                    sane(n_heads, 1024) && sane(n_kv_heads, 1024) && sane(vocab, 1 << 22) &&
                    sane(seq_len, 1 << 22),
                "llama2.c checkpoint '", path, "' has an implausible header (dim=", dim,
                " hidden_dim=", hidden, " n_layers=", n_layers, " n_heads=", n_heads,
                " n_kv_heads=", n_kv_heads, " vocab_size=", header[5], " seq_len=", seq_len, ")");
  SPECBED_CHECK(dim % n_heads == 0 && n_heads % n_kv_heads == 0 && (dim / n_heads) % 2 == 0,
                "llama2.c checkpoint '", path, "': dim ", dim, " / n_heads ", n_heads,
                " / n_kv_heads ", n_kv_heads, " do not form an even head size with GQA groups");

  LlamaConfig config;
  config.architecture = "llama2c";
  config.dim = dim;
  config.hidden_dim = hidden;
  config.n_layers = n_layers;
  config.n_heads = n_heads;
  config.n_kv_heads = n_kv_heads;
  config.head_dim = dim / n_heads;
  config.vocab_size = vocab;
  config.max_seq_len = seq_len;
  config.rope_theta = 10000.0;
  config.norm_eps = 1e-5;
  config.tie_embeddings = shared_classifier;
  config.rope_interleaved = true;
  config.bos_token_id = 1;
  config.eos_token_ids = {2};
  config.torch_dtype = "float32";

  return config;
}

}  // namespace specbed
