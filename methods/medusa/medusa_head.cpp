// Medusa head files and forward (see medusa_head.h).
#include "methods/medusa/medusa_head.h"

#include <ATen/ATen.h>

#include <cmath>

#include <set>
#include <vector>

#include "base/error.h"
#include "models/checkpoint/head_checkpoint.h"
#include "models/checkpoint/hf_checkpoint.h"
#include "models/gemv.h"

namespace specbed {
namespace {

int64_t PositiveField(const nlohmann::json& config, const char* key, const std::string& where) {
  SPECBED_CHECK(
      config.contains(key) && config[key].is_number_integer() && config[key].get<int64_t>() >= 1,
      where, ": config.json needs a positive integer \"", key, "\"");
  return config[key].get<int64_t>();
}

void CheckShape(const std::map<std::string, at::Tensor>& tensors,
                const std::map<std::string, std::string>& origin, const std::string& name,
                std::vector<int64_t> shape, const std::string& where) {
  const auto it = tensors.find(name);
  SPECBED_CHECK(it != tensors.end(), where, ": tensor '", name,
                "' is missing (medusa_num_heads / medusa_num_layers in config.json imply it)");
  SPECBED_CHECK(it->second.sizes().vec() == shape, where, ": ", origin.at(name), " has shape ",
                it->second.sizes(), ", expected ", at::IntArrayRef(shape));
}

}  // namespace

std::string MedusaBlockWeightName(int64_t head, int64_t layer) {
  return std::to_string(head) + "." + std::to_string(layer) + ".linear.weight";
}
std::string MedusaBlockBiasName(int64_t head, int64_t layer) {
  return std::to_string(head) + "." + std::to_string(layer) + ".linear.bias";
}
std::string MedusaLmHeadName(int64_t head, int64_t num_layers) {
  return std::to_string(head) + "." + std::to_string(num_layers) + ".weight";
}

namespace {

constexpr char kCalibrationKey[] = "specbed_calibration";

// config.json's "specbed_calibration": {"head_rank_accuracy": K rows of top_k values}.
std::vector<std::vector<double>> ReadCalibration(const nlohmann::json& config,
                                                 const MedusaConfig& c, const std::string& where) {
  const nlohmann::json& cal = config[kCalibrationKey];
  const std::string what = where + ": \"" + kCalibrationKey + "\".head_rank_accuracy";
  SPECBED_CHECK(cal.is_object() && cal.contains("head_rank_accuracy") &&
                    cal["head_rank_accuracy"].is_array() &&
                    static_cast<int64_t>(cal["head_rank_accuracy"].size()) == c.num_heads,
                what, " must be an array of medusa_num_heads (", c.num_heads, ") rows");
  std::vector<std::vector<double>> out;
  for (const nlohmann::json& row : cal["head_rank_accuracy"]) {
    SPECBED_CHECK(
        row.is_array() && !row.empty() && (out.empty() || row.size() == out.front().size()), what,
        ": every row must be a non-empty array of the same length");
    std::vector<double> values;
    double sum = 0;
    for (const nlohmann::json& v : row) {
      SPECBED_CHECK(v.is_number() && v.get<double>() >= 0 && v.get<double>() <= 1, what,
                    ": values must be numbers in [0, 1], got ", v.dump());
      values.push_back(v.get<double>());
      sum += values.back();
    }
    SPECBED_CHECK(sum <= 1 + 1e-9, what, ": a row sums to ", sum, " (> 1)");
    out.push_back(std::move(values));
  }
  return out;
}

}  // namespace

MedusaHead ReadMedusaCheckpoint(const std::string& dir, int64_t target_dim, int64_t target_vocab) {
  const std::string where = "Medusa checkpoint '" + dir + "'";
  const HeadConfigFile file = ReadHeadConfig(dir, where);
  MedusaHead head;
  MedusaConfig& c = head.config;
  c.num_heads = PositiveField(file.config, "medusa_num_heads", where);
  c.num_layers = PositiveField(file.config, "medusa_num_layers", where);
  if (file.config.contains("base_model_name_or_path") &&
      file.config["base_model_name_or_path"].is_string()) {
    c.base_model = file.config["base_model_name_or_path"].get<std::string>();
  }
  if (file.config.contains(kCalibrationKey))
    c.rank_accuracy = ReadCalibration(file.config, c, where);
  HeadTensors read =
      ReadHeadTensors(dir, where,
                      "(torch.load the medusa_lm_head.pt state dict and save_file it as "
                      "medusa_lm_head.safetensors with the same names)");
  const std::string lm0 = MedusaLmHeadName(0, c.num_layers);
  const auto it = read.tensors.find(lm0);
  SPECBED_CHECK(it != read.tensors.end() && it->second.dim() == 2, where, ": tensor '", lm0,
                "' (head 0's lm_head, [vocab, hidden]) is missing");
  c.vocab_size = it->second.size(0);
  c.hidden_size = it->second.size(1);
  SPECBED_CHECK(target_dim <= 0 || c.hidden_size == target_dim, where, ": hidden size ",
                c.hidden_size, " (from '", lm0, "') does not match the target's ", target_dim);
  SPECBED_CHECK(target_vocab <= 0 || c.vocab_size == target_vocab, where, ": vocabulary ",
                c.vocab_size, " (from '", lm0, "') does not match the target's ", target_vocab);
  std::set<std::string> expected;
  for (int64_t k = 0; k < c.num_heads; ++k) {
    for (int64_t j = 0; j < c.num_layers; ++j) {
      CheckShape(read.tensors, read.origin, MedusaBlockWeightName(k, j),
                 {c.hidden_size, c.hidden_size}, where);
      CheckShape(read.tensors, read.origin, MedusaBlockBiasName(k, j), {c.hidden_size}, where);
      expected.insert({MedusaBlockWeightName(k, j), MedusaBlockBiasName(k, j)});
    }
    CheckShape(read.tensors, read.origin, MedusaLmHeadName(k, c.num_layers),
               {c.vocab_size, c.hidden_size}, where);
    expected.insert(MedusaLmHeadName(k, c.num_layers));
  }
  for (const auto& [name, t] : read.tensors) {
    SPECBED_CHECK(expected.count(name), where, ": unexpected tensor ", read.origin.at(name),
                  " (medusa_num_heads ", c.num_heads, ", medusa_num_layers ", c.num_layers, ")");
  }
  head.tensors = std::move(read.tensors);
  return head;
}

void WriteMedusaCheckpoint(const std::string& dir, const MedusaHead& head,
                           const nlohmann::json& recipe) {
  const MedusaConfig& c = head.config;
  nlohmann::ordered_json config = c.base_fields;
  config["architectures"] = {"MedusaModel"};
  config["medusa_num_heads"] = c.num_heads;
  config["medusa_num_layers"] = c.num_layers;
  config["base_model_name_or_path"] = c.base_model;
  config["hidden_size"] = c.hidden_size;
  config["vocab_size"] = c.vocab_size;
  config["torch_dtype"] = "float32";
  if (!c.rank_accuracy.empty()) {
    config[kCalibrationKey] = {
        {"head_rank_accuracy", c.rank_accuracy},
        {"meaning",
         "head_rank_accuracy[k][r]: held-out frequency with which the label (token t + k + 2) is "
         "head k's r-th candidate (specbed train medusa); the medusa method's calibrated tree"}};
  }
  WriteHeadCheckpoint(dir, config, recipe, head.tensors, SafetensorsDtype::kF32,
                      "Medusa checkpoint '" + dir + "'", kMedusaTensorFile);
}

MedusaHead InitMedusaHead(const MedusaConfig& config, const at::Tensor& lm_head, uint64_t seed) {
  SPECBED_CHECK(config.num_heads >= 1 && config.num_layers >= 1,
                "Medusa: num_heads and num_layers must be >= 1");
  MedusaHead head;
  head.config = config;
  const at::Tensor base = lm_head.to(at::kCPU, at::kFloat).contiguous();
  head.config.vocab_size = base.size(0);
  head.config.hidden_size = base.size(1);
  const int64_t d = head.config.hidden_size;
  for (int64_t k = 0; k < config.num_heads; ++k) {
    for (int64_t j = 0; j < config.num_layers; ++j) {
      // Medusa-1: the block's W starts at zero (so each head starts as the target's lm_head);
      // its bias keeps nn.Linear's default, uniform in +-1/sqrt(d).
      head.tensors[MedusaBlockWeightName(k, j)] = at::zeros({d, d});
      at::Tensor bias = at::empty({d}, at::kFloat);
      const std::string name = MedusaBlockBiasName(k, j);
      FillSeededUniform(bias.data_ptr<float>(), d, TensorNameSeed(seed, name),
                        1.0 / std::sqrt(static_cast<double>(d)));
      head.tensors[name] = bias;
    }
    head.tensors[MedusaLmHeadName(k, config.num_layers)] = base.clone();
  }
  return head;
}

at::Tensor MedusaLogits(const MedusaHead& head, const at::Tensor& hidden) {
  const MedusaConfig& c = head.config;
  const at::ScalarType dtype = head.tensors.at(MedusaLmHeadName(0, c.num_layers)).scalar_type();
  SPECBED_CHECK(
      hidden.dim() == 2 && hidden.size(1) == c.hidden_size && hidden.scalar_type() == dtype,
      "MedusaLogits: hidden must be ", c10::toString(dtype), " [N, ", c.hidden_size,
      "] (the heads' dtype), got ", hidden.sizes(), " ", hidden.scalar_type());
  std::vector<at::Tensor> out;
  out.reserve(c.num_heads);
  for (int64_t k = 0; k < c.num_heads; ++k) {
    at::Tensor h = hidden;
    for (int64_t j = 0; j < c.num_layers; ++j) {
      h = h + at::silu(at::linear(h, head.tensors.at(MedusaBlockWeightName(k, j)),
                                  head.tensors.at(MedusaBlockBiasName(k, j))));
    }
    out.push_back(at::linear(h, head.tensors.at(MedusaLmHeadName(k, c.num_layers))));
  }
  return at::stack(out).to(at::kFloat);  // a no-op for float32 heads
}

namespace {

// h <- h + SiLU(t), element by element in float32, rounded once to h's dtype.
void AddSilu(const at::Tensor& h, const at::Tensor& t) {
  const bool wide = h.scalar_type() == at::kFloat;
  const at::Tensor hf = wide ? h : h.to(at::kFloat);
  const at::Tensor tf = t.to(at::kFloat);  // no copy for float32
  float* x = hf.data_ptr<float>();
  const float* y = tf.data_ptr<float>();
  for (int64_t i = 0, n = hf.numel(); i < n; ++i) x[i] += y[i] / (1.f + std::exp(-y[i]));
  if (!wide) h.copy_(hf);
}

}  // namespace

at::Tensor MedusaLogitsRows(const MedusaHead& head, const at::Tensor& hidden) {
  const MedusaConfig& c = head.config;
  const at::Tensor& lm0 = head.tensors.at(MedusaLmHeadName(0, c.num_layers));
  SPECBED_CHECK(hidden.dim() == 2 && hidden.size(1) == c.hidden_size &&
                    hidden.scalar_type() == lm0.scalar_type() && hidden.device().is_cpu() &&
                    lm0.device().is_cpu() && hidden.is_contiguous(),
                "MedusaLogitsRows: hidden must be ", c10::toString(lm0.scalar_type()), " [N, ",
                c.hidden_size, "] contiguous on the CPU beside CPU heads, got ", hidden.sizes(),
                " ", hidden.scalar_type(), " on ", hidden.device(), " (heads on ", lm0.device(),
                ")");
  const int64_t n = hidden.size(0);
  const at::Tensor out = at::empty({c.num_heads, n, c.vocab_size}, lm0.options());
  const at::Tensor t = at::empty_like(hidden);
  for (int64_t k = 0; k < c.num_heads; ++k) {
    at::Tensor h = c.num_layers > 0 ? hidden.clone() : hidden;
    for (int64_t j = 0; j < c.num_layers; ++j) {
      GemvRows(h, head.tensors.at(MedusaBlockWeightName(k, j)),
               head.tensors.at(MedusaBlockBiasName(k, j)), t, /*accumulate=*/false);
      AddSilu(h, t);
    }
    GemvRows(h, head.tensors.at(MedusaLmHeadName(k, c.num_layers)), at::Tensor(), out.select(0, k),
             /*accumulate=*/false);
  }
  return out.to(at::kFloat);
}

}  // namespace specbed
