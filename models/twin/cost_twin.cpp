// Cost-twin padding (see cost_twin.h).
#include "models/twin/cost_twin.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstring>
#include <regex>
#include <vector>

#include "base/error.h"
#include "base/names.h"
#include "models/checkpoint/head_checkpoint.h"
#include "models/checkpoint/llama2c_checkpoint.h"
#include "models/checkpoint/safetensors.h"

namespace specbed {
namespace {

using Json = nlohmann::ordered_json;

// `name` is `suffix` or ends with "." + suffix.
bool EndsWithName(const std::string& name, const std::string& suffix) {
  return name == suffix || EndsWith(name, "." + suffix);
}

using Axis = TwinAxis;

// The generic rules, by suffix after a dot; ordered: the first match wins (q_norm / k_norm before
// the generic norm rule, which comes after the methods' rules).
const std::vector<TwinPadRule>& GenericRules() {
  static const std::vector<TwinPadRule> rules = [] {
    const std::pair<const char*, std::vector<Axis>> by_suffix[] = {
        {"embed_tokens.weight", {Axis::kKeep, Axis::kHidden}},
        {"lm_head.weight", {Axis::kKeep, Axis::kHidden}},
        {"q_proj.weight", {Axis::kQHeads, Axis::kHidden}},
        {"k_proj.weight", {Axis::kKvHeads, Axis::kHidden}},
        {"v_proj.weight", {Axis::kKvHeads, Axis::kHidden}},
        {"q_proj.bias", {Axis::kQHeads}},
        {"k_proj.bias", {Axis::kKvHeads}},
        {"v_proj.bias", {Axis::kKvHeads}},
        {"o_proj.weight", {Axis::kHidden, Axis::kQHeads}},
        {"gate_proj.weight", {Axis::kFfn, Axis::kHidden}},
        {"up_proj.weight", {Axis::kFfn, Axis::kHidden}},
        {"down_proj.weight", {Axis::kHidden, Axis::kFfn}},
        {"fc.weight", {Axis::kHidden, Axis::kTargetHidden}},
        {"q_norm.weight", {Axis::kKeep}},
        {"k_norm.weight", {Axis::kKeep}},
    };
    std::vector<TwinPadRule> out;
    for (const auto& [suffix, axes] : by_suffix) out.push_back({TwinSuffixPattern(suffix), axes});
    return out;
  }();
  return rules;
}

// Any other 1-d "...norm.weight" (input_layernorm, post_attention_layernorm, hidden_norm,
// model.norm, norm) is an RMSNorm over the hidden width.
const TwinPadRule& HiddenNormRule() {
  static const TwinPadRule rule{".*norm\\.weight", {Axis::kHidden}, true};
  return rule;
}

const TwinPadRule* FindRule(const std::string& name, const std::vector<TwinPadRule>& method_rules) {
  for (const auto* rules : {&GenericRules(), &method_rules}) {
    for (const TwinPadRule& r : *rules) {
      if (std::regex_match(name, std::regex(r.pattern))) return &r;
    }
  }
  if (std::regex_match(name, std::regex(HiddenNormRule().pattern))) return &HiddenNormRule();
  return nullptr;
}

int64_t GetPositive(const Json& config, const char* key, const std::string& source) {
  SPECBED_CHECK(
      config.contains(key) && config[key].is_number_integer() && config[key].get<int64_t>() > 0,
      source, ": config.json needs a positive integer \"", key, "\" to build a cost twin");
  return config[key].get<int64_t>();
}

struct Widths {
  int64_t block = 0, padded = 0;
  bool blocked = false;  // the axis may hold k blocks (concatenated inputs)
};

// Pads axis `axis` of `t` from `w.block` (or k blocks of it) to `w.padded` (per block), zeros
// elsewhere.
at::Tensor PadAxis(const at::Tensor& t, int64_t axis, const Widths& w, const std::string& name,
                   const std::string& source) {
  const int64_t size = t.size(axis);
  int64_t blocks = 1;
  if (w.blocked) {
    SPECBED_CHECK(size % w.block == 0, source, ": tensor '", name, "' axis ", axis, " has size ",
                  size, ", not a multiple of ", w.block, " as its config implies");
    blocks = size / w.block;
  } else {
    SPECBED_CHECK(size == w.block, source, ": tensor '", name, "' axis ", axis, " has size ", size,
                  " but its config implies ", w.block);
  }
  if (w.padded == w.block) return t;
  std::vector<int64_t> sizes = t.sizes().vec();
  sizes[axis] = blocks * w.padded;
  at::Tensor out = at::zeros(sizes, t.options());
  for (int64_t b = 0; b < blocks; ++b) {
    out.narrow(axis, b * w.padded, w.block).copy_(t.narrow(axis, b * w.block, w.block));
  }
  return out;
}

// The attention layout of a twin: heads, KV heads and head_dim before (`*_old`) and after.
struct HeadLayout {
  int64_t heads_old, kv_old, hd_old, heads_new, kv_new, hd_new;
  bool Regrouped() const {
    return hd_new != hd_old || heads_new * kv_old != heads_old * kv_new ||
           heads_new % heads_old != 0;
  }
  // New flat index of (head h, dim d) of the q side (q heads) or the kv side.
  int64_t Map(int64_t h, int64_t d, bool q_side) const {
    const int64_t g_old = heads_old / kv_old, g_new = heads_new / kv_new;
    const int64_t head = q_side ? (h / g_old) * g_new + h % g_old : h;
    const int64_t half = hd_old / 2, stride = hd_new / hd_old;
    const int64_t dim = d < half ? d * stride : hd_new / 2 + (d - half) * stride;
    return head * hd_new + dim;
  }
};

// Places axis `axis` of `t` (q-side heads or kv-side heads x head_dim) at the layout's new
// indices, zeros elsewhere.
at::Tensor MapHeadAxis(const at::Tensor& t, int64_t axis, const HeadLayout& l, bool q_side,
                       const std::string& name, const std::string& source) {
  const int64_t n_old = q_side ? l.heads_old : l.kv_old, n_new = q_side ? l.heads_new : l.kv_new;
  SPECBED_CHECK(t.size(axis) == n_old * l.hd_old, source, ": tensor '", name, "' axis ", axis,
                " has size ", t.size(axis), " but its config implies ", n_old * l.hd_old);
  std::vector<int64_t> index(static_cast<size_t>(n_old * l.hd_old));
  for (int64_t h = 0; h < n_old; ++h) {
    for (int64_t d = 0; d < l.hd_old; ++d) index[h * l.hd_old + d] = l.Map(h, d, q_side);
  }
  std::vector<int64_t> sizes = t.sizes().vec();
  sizes[axis] = n_new * l.hd_new;
  return at::zeros(sizes, t.options()).index_copy_(axis, at::tensor(index, at::kLong), t);
}

// Rows of each head reordered from interleaved pairs (2i, 2i+1) to rotate_half (i, i + d/2).
at::Tensor InterleavedToHalves(const at::Tensor& w, int64_t n_heads, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  std::vector<int64_t> order;
  order.reserve(n_heads * head_dim);
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t i = 0; i < half; ++i) order.push_back(h * head_dim + 2 * i);
    for (int64_t i = 0; i < half; ++i) order.push_back(h * head_dim + 2 * i + 1);
  }
  at::Tensor index = at::empty({static_cast<int64_t>(order.size())}, at::kLong);
  for (size_t i = 0; i < order.size(); ++i) index.data_ptr<int64_t>()[i] = order[i];
  return w.index_select(0, index).contiguous();
}

}  // namespace

HfCheckpointFiles ReadCheckpointFiles(const std::string& dir) {
  const std::string where = "checkpoint '" + dir + "'";
  HeadConfigFile config = ReadHeadConfig(dir, where);
  HeadTensors tensors = ReadHeadTensors(dir, where, "");
  HfCheckpointFiles out;
  out.config = Json(config.config);
  out.tensors = std::move(tensors.tensors);
  return out;
}

HfCheckpointFiles Llama2cAsHf(const std::string& path) {
  Llama2cCheckpoint ckpt = ReadLlama2cCheckpoint(path);
  LlamaConfig config = ckpt.config;
  HfCheckpointFiles out;
  for (auto& [name, t] : ckpt.tensors) {
    if (EndsWithName(name, "q_proj.weight")) {
      out.tensors[name] = InterleavedToHalves(t, config.n_heads, config.head_dim);
    } else if (EndsWithName(name, "k_proj.weight")) {
      out.tensors[name] = InterleavedToHalves(t, config.n_kv_heads, config.head_dim);
    } else {
      out.tensors[name] = t;
    }
  }
  config.architecture = "LlamaForCausalLM";
  config.rope_interleaved = false;
  out.config = Json(config.ToHfJson());
  return out;
}

// Identity layers [layers, depth): every tensor of the last original layer, zero-valued, under
// the new index (zero o_proj and down_proj pass the residual through).
void AppendIdentityLayers(int64_t layers, int64_t depth, const std::string& source,
                          HfCheckpointFiles& out) {
  static const std::regex kLayer(R"(^(.*\blayers\.)(\d+)(\..*)$)");
  std::vector<std::pair<std::string, std::string>> last;  // (prefix, suffix) of layer L-1
  for (const auto& [name, t] : out.tensors) {
    std::smatch m;
    if (std::regex_match(name, m, kLayer) && std::stoll(m[2].str()) == layers - 1) {
      last.emplace_back(m[1].str(), m[3].str());
    }
  }
  SPECBED_CHECK(!last.empty(), source, ": no tensors named '*layers.", layers - 1,
                ".*' to model identity layers on");
  for (int64_t l = layers; l < depth; ++l) {
    for (const auto& [prefix, suffix] : last) {
      const at::Tensor& like = out.tensors.at(prefix + std::to_string(layers - 1) + suffix);
      out.tensors[prefix + std::to_string(l) + suffix] = at::zeros_like(like);
    }
  }
}

// Refuses explicit attention shapes the padding cannot keep exact.
void CheckHeadLayout(const HeadLayout& l, int64_t ffn, int64_t ffn_new, const HfCheckpointFiles& in,
                     const std::string& source) {
  SPECBED_CHECK(l.hd_new >= l.hd_old && l.hd_new % l.hd_old == 0 && l.hd_new % 2 == 0, source,
                ": cost-twin head_dim ", l.hd_new, " must be a multiple of the original ",
                l.hd_old);
  SPECBED_CHECK(l.kv_new >= l.kv_old && l.heads_new % l.kv_new == 0 &&
                    l.heads_new / l.kv_new >= l.heads_old / l.kv_old,
                source, ": cost-twin heads ", l.heads_new, " / kv_heads ", l.kv_new,
                " cannot hold the original ", l.heads_old, " / ", l.kv_old,
                " (need kv_heads >= the original's and a group of at least ",
                l.heads_old / l.kv_old, " q heads)");
  SPECBED_CHECK(ffn_new >= ffn, source, ": cost-twin ffn ", ffn_new, " is below the original's ",
                ffn);
  if (l.hd_new == l.hd_old) return;
  for (const auto& [name, t] : in.tensors) {
    SPECBED_CHECK(!EndsWithName(name, "q_norm.weight") && !EndsWithName(name, "k_norm.weight"),
                  source, ": a wider head_dim cannot keep per-head q/k norms exact ('", name,
                  "'); pad heads instead");
  }
}

namespace {

// The original shape a cost twin pads, read from its config.json.
struct TwinOriginal {
  int64_t hidden, n_heads, n_kv, head_dim, ffn, layers, target_hidden;
  double eps;
};

TwinOriginal ReadTwinOriginal(const Json& c, const std::string& source) {
  TwinOriginal o;
  o.hidden = GetPositive(c, "hidden_size", source);
  o.n_heads = GetPositive(c, "num_attention_heads", source);
  o.n_kv =
      c.contains("num_key_value_heads") ? GetPositive(c, "num_key_value_heads", source) : o.n_heads;
  o.head_dim = c.contains("head_dim") && c["head_dim"].is_number_integer()
                   ? c["head_dim"].get<int64_t>()
                   : o.hidden / o.n_heads;
  o.ffn = GetPositive(c, "intermediate_size", source);
  o.layers = GetPositive(c, "num_hidden_layers", source);
  o.target_hidden =
      c.contains("target_hidden_size") ? GetPositive(c, "target_hidden_size", source) : o.hidden;
  SPECBED_CHECK(c.contains("rms_norm_eps") && c["rms_norm_eps"].is_number() &&
                    c["rms_norm_eps"].get<double>() > 0,
                source, ": config.json needs a positive \"rms_norm_eps\" to build a cost twin");
  o.eps = c["rms_norm_eps"].get<double>();
  return o;
}

// Everything one tensor's padding needs.
struct TwinPadding {
  int64_t hidden, f;
  HeadLayout heads;
  std::map<Axis, Widths> widths;
  double q_scale, norm_scale;
  const std::string& source;
  const std::vector<TwinPadRule>& method_rules;
};

// The rank head's [hidden | rest] axis: the hidden columns padded and scaled by sqrt(d/D) (it
// reads RMS-normalised h, sqrt(D/d) times the original over the padded width), the rest kept.
at::Tensor PadHiddenThenRest(const at::Tensor& t, int64_t a, const TwinPadding& p,
                             const std::string& name) {
  const int64_t size = t.size(a);
  SPECBED_CHECK(size > p.hidden, p.source, ": tensor '", name, "' axis ", a, " has size ", size,
                ", expected hidden_size ", p.hidden, " + extra columns");
  return at::cat({PadAxis(t.narrow(a, 0, p.hidden) * p.norm_scale, a,
                          {p.hidden, p.hidden * p.f, false}, name, p.source),
                  t.narrow(a, p.hidden, size - p.hidden)},
                 a);
}

// One floating-point tensor of the original, padded axis by axis under its rule.
at::Tensor PadTwinTensor(const std::string& name, const at::Tensor& t, const TwinPadding& p) {
  const TwinPadRule* rule = FindRule(name, p.method_rules);
  SPECBED_CHECK(rule != nullptr, p.source, ": no cost-twin padding rule for tensor '", name,
                "' (shape [", t.sizes(),
                "]); known: *_proj.weight/bias, embed_tokens, lm_head, fc, *norm.weight "
                "(models/twin/cost_twin.cpp) and the ",
                p.method_rules.size(),
                " rules the methods declare (MethodRegistry::AddTwinPadRules)");
  SPECBED_CHECK(t.dim() == static_cast<int64_t>(rule->axes.size()), p.source, ": tensor '", name,
                "' has ", t.dim(), " dims, its rule expects ", rule->axes.size());
  at::Tensor padded = t.to(at::kFloat);
  for (size_t i = 0; i < rule->axes.size(); ++i) {
    const Axis axis = rule->axes[i];
    const int64_t a = static_cast<int64_t>(i);
    if (axis == Axis::kKeep) continue;
    if (axis == Axis::kHiddenThenRest) {
      padded = PadHiddenThenRest(padded, a, p, name);
    } else if (p.heads.Regrouped() && (axis == Axis::kQHeads || axis == Axis::kKvHeads)) {
      padded = MapHeadAxis(padded, a, p.heads, axis == Axis::kQHeads, name, p.source);
    } else {
      padded = PadAxis(padded, a, p.widths.at(axis), name, p.source);
    }
  }
  // A wider head_dim: q grows by sqrt(hd'/hd) so q.k / sqrt(hd') is the original score.
  if (p.heads.hd_new != p.heads.hd_old &&
      (EndsWithName(name, "q_proj.weight") || EndsWithName(name, "q_proj.bias"))) {
    padded = padded * p.q_scale;
  }
  if (rule->hidden_norm) padded = padded * p.norm_scale;
  return padded.contiguous();
}

// The twin's config.json: the padded shape, and the recipe that says what it is a twin of.
Json TwinConfig(const Json& c, const TwinOriginal& o, const HeadLayout& heads, int64_t ffn_new,
                int64_t depth, int64_t f, int64_t tf, const std::string& of) {
  Json config = c;
  config["hidden_size"] = o.hidden * f;
  config["intermediate_size"] = ffn_new;
  config["num_attention_heads"] = heads.heads_new;
  config["num_key_value_heads"] = heads.kv_new;
  config["head_dim"] = heads.hd_new;
  config["num_hidden_layers"] = depth;
  config["rms_norm_eps"] = o.eps / static_cast<double>(f);
  if (c.contains("target_hidden_size")) config["target_hidden_size"] = o.target_hidden * tf;
  Json recipe;
  recipe["of"] = of;
  recipe["width"] = o.hidden * f;
  recipe["depth"] = depth;
  recipe["width_factor"] = f;
  recipe["target_width_factor"] = tf;
  recipe["feature_depth"] = o.layers;
  if (heads.Regrouped() || ffn_new != o.ffn * f) {
    recipe["attention"] = {{"heads", heads.heads_new},
                           {"kv_heads", heads.kv_new},
                           {"head_dim", heads.hd_new},
                           {"ffn", ffn_new}};
  }
  recipe["original"] = {{"hidden_size", o.hidden},
                        {"intermediate_size", o.ffn},
                        {"num_attention_heads", o.n_heads},
                        {"num_key_value_heads", o.n_kv},
                        {"head_dim", o.head_dim},
                        {"num_hidden_layers", o.layers},
                        {"rms_norm_eps", o.eps}};
  recipe["label"] = StrCat("cost twin of ", of, " (width ", o.hidden * f, ", ", depth,
                           " layers; computes exactly ", of, "'s function with zero-weight ",
                           "padding, at the cost of the larger shape)");
  recipe["format_version"] = 1;
  config[kTwinRecipeKey] = recipe;
  return config;
}

}  // namespace

at::Tensor PadInputBlocks(const at::Tensor& weight, int64_t block, int64_t padded) {
  SPECBED_CHECK(weight.dim() == 2 && block > 0 && padded >= block && weight.size(1) % block == 0,
                "PadInputBlocks: weight [", weight.sizes(), "] is not [out, k * ", block,
                "] or the padded width ", padded, " is smaller");
  return PadAxis(weight, 1, {block, padded, true}, "weight", "PadInputBlocks");
}

std::string TwinSuffixPattern(const std::string& suffix) {
  std::string escaped;
  for (char c : suffix) {
    if (std::strchr(".[]{}()*+?^$|\\", c) != nullptr) escaped += '\\';
    escaped += c;
  }
  return "(.*\\.)?" + escaped;
}

HfCheckpointFiles PadToCostTwin(const HfCheckpointFiles& in, const TwinShape& shape,
                                const std::string& of, const std::string& source,
                                const std::vector<TwinPadRule>& method_rules) {
  const int64_t f = shape.width_factor;
  const int64_t tf = shape.target_width_factor > 0 ? shape.target_width_factor : f;
  SPECBED_CHECK(f >= 1 && f <= 64 && tf >= 1 && tf <= 64, source,
                ": cost-twin width factors must be in [1, 64], got ", f, " and ", tf);
  SPECBED_CHECK(!in.config.contains(kTwinRecipeKey), source,
                ": is already a cost twin; pad the original instead");
  const TwinOriginal o = ReadTwinOriginal(in.config, source);
  const int64_t depth = shape.depth > 0 ? shape.depth : o.layers;
  SPECBED_CHECK(depth >= o.layers, source, ": cost-twin depth ", depth, " is below the original's ",
                o.layers, " layers (depth is only ever padded)");
  SPECBED_CHECK(depth <= 4096, source, ": cost-twin depth ", depth, " is absurd (limit 4096)");
  const HeadLayout heads{o.n_heads,
                         o.n_kv,
                         o.head_dim,
                         shape.heads > 0 ? shape.heads : o.n_heads * f,
                         shape.kv_heads > 0 ? shape.kv_heads : o.n_kv * f,
                         shape.head_dim > 0 ? shape.head_dim : o.head_dim};
  const int64_t ffn_new = shape.ffn > 0 ? shape.ffn : o.ffn * f;
  CheckHeadLayout(heads, o.ffn, ffn_new, in, source);
  const TwinPadding padding{
      o.hidden,
      f,
      heads,
      {{Axis::kHidden, {o.hidden, o.hidden * f, true}},
       {Axis::kTargetHidden, {o.target_hidden, o.target_hidden * tf, true}},
       {Axis::kQHeads, {o.n_heads * o.head_dim, o.n_heads * f * o.head_dim, false}},
       {Axis::kKvHeads, {o.n_kv * o.head_dim, o.n_kv * f * o.head_dim, false}},
       {Axis::kFfn, {o.ffn, ffn_new, false}}},
      std::sqrt(static_cast<double>(heads.hd_new) / heads.hd_old),
      std::sqrt(1.0 / static_cast<double>(f)),
      source,
      method_rules};
  HfCheckpointFiles out;
  for (const auto& [name, t] : in.tensors) {
    if (EndsWith(name, "rotary_emb.inv_freq")) continue;
    // d2t / t2d and other index maps are kept as they are.
    out.tensors[name] = t.is_floating_point() ? PadTwinTensor(name, t, padding) : t;
  }
  if (depth > o.layers) AppendIdentityLayers(o.layers, depth, source, out);
  out.config = TwinConfig(in.config, o, heads, ffn_new, depth, f, tf, of);
  return out;
}

void WriteCheckpointFiles(const std::string& dir, const HfCheckpointFiles& files,
                          SafetensorsDtype float_dtype) {
  const std::string where = "cost twin '" + dir + "'";
  nlohmann::ordered_json config = files.config;
  config["torch_dtype"] = HeadTorchDtype(float_dtype, where);
  WriteHeadCheckpoint(dir, config, nullptr, files.tensors, float_dtype, where);
}

std::string TwinLabel(const nlohmann::json& config) {
  if (!config.is_object() || !config.contains(kTwinRecipeKey)) return "";
  const auto& r = config[kTwinRecipeKey];
  if (!r.is_object() || !r.contains("label") || !r["label"].is_string()) return "";
  return r["label"].get<std::string>();
}

}  // namespace specbed
