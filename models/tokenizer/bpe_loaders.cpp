// Loaders for byte-level BPE tokenizers: HF tokenizer.json (model BPE, ByteLevel / Split / Digits
// pre-tokenizers, added tokens, TemplateProcessing BOS) and GPT-2 vocab.json + merges.txt.
// Checked by: tests/tokenizer/hf_tokenizer_test.cpp (written Llama-3-style file, malformed files)
// and tests/tokenizer/gpt2_tokenizer_test.cpp (shipped models/tokenizer/gpt2 files).
#include <nlohmann/json.hpp>

#include <optional>
#include <sstream>

#include "base/error.h"
#include "base/json_read.h"
#include "base/mapped_file.h"
#include "models/tokenizer/bpe_tokenizer.h"

namespace specbed {
namespace {

using nlohmann::json;

json ParseJsonFile(const std::string& path, const std::string& what) {
  JsonParseOptions options;
  options.expected = "a " + what;
  return ReadJsonFile(path, options);
}

// A token id from a JSON number: an integer in [0, 2^31 - 1] (ids >= 2^32 or negative ones would
// otherwise wrap silently in the int32 conversion).
int32_t ReadTokenId(const json& id, const std::string& where) {
  SPECBED_CHECK(id.is_number_integer(), where, " must have an integer id, got ", id.dump());
  SPECBED_CHECK(id.is_number_unsigned()
                    ? id.get<uint64_t>() <= uint64_t{INT32_MAX}
                    : (id.get<int64_t>() >= 0 && id.get<int64_t>() <= INT32_MAX),
                where, " has id ", id.dump(), ", outside [0, 2147483647]");
  return static_cast<int32_t>(id.get<int64_t>());
}

std::shared_ptr<PcreRegex> Gpt2Regex(const std::string& where) {
  return std::make_shared<PcreRegex>(kGpt2SplitPattern, /*literal=*/false, where);
}

// Normalizers: null, NFC (applied through libutf8proc) and Sequences of those are accepted.
// Sets *nfc when an NFC step is present.
void ParseNormalizer(const json& j, const std::string& path, bool* nfc) {
  if (j.is_null()) return;
  SPECBED_CHECK(j.is_object(), path, ": 'normalizer' must be an object or null");
  const std::string type = j.value("type", "");
  if (type == "NFC") {
    *nfc = true;
    return;
  }
  if (type == "Sequence") {
    for (const json& n : j.at("normalizers")) ParseNormalizer(n, path, nfc);
    return;
  }
  Fail(path, ": unsupported normalizer type '", type,
       "' (supported: null, NFC, Sequence of those)");
}

BpeSplitStep::Behavior ParseBehavior(const std::string& name, const std::string& path) {
  using B = BpeSplitStep::Behavior;
  if (name == "Removed") return B::kRemoved;
  if (name == "Isolated") return B::kIsolated;
  if (name == "MergedWithPrevious") return B::kMergedWithPrevious;
  if (name == "MergedWithNext") return B::kMergedWithNext;
  if (name == "Contiguous") return B::kContiguous;
  Fail(path, ": unsupported Split behavior '", name,
       "' (expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous)");
}

void ParsePreTokenizer(const json& j, const std::string& path, std::vector<BpeSplitStep>* steps,
                       bool* has_byte_level) {
  SPECBED_CHECK(j.is_object(), path, ": 'pre_tokenizer' must be an object");
  const std::string type = j.value("type", "");
  if (type == "Sequence") {
    for (const json& p : j.at("pretokenizers")) ParsePreTokenizer(p, path, steps, has_byte_level);
  } else if (type == "ByteLevel") {
    *has_byte_level = true;
    BpeSplitStep step;
    step.add_prefix_space = j.value("add_prefix_space", true);
    if (j.value("use_regex", true)) step.regex = Gpt2Regex(path);
    if (step.add_prefix_space || step.regex) steps->push_back(std::move(step));
  } else if (type == "Split") {
    const json& pattern = j.at("pattern");
    BpeSplitStep step;
    if (pattern.contains("Regex")) {
      step.regex = std::make_shared<PcreRegex>(pattern.at("Regex").get<std::string>(), false, path);
    } else if (pattern.contains("String")) {
      step.regex = std::make_shared<PcreRegex>(pattern.at("String").get<std::string>(), true, path);
    } else {
      Fail(path, ": Split pre_tokenizer pattern must have 'Regex' or 'String'");
    }
    step.behavior = ParseBehavior(j.at("behavior").get<std::string>(), path);
    step.invert = j.value("invert", false);
    steps->push_back(std::move(step));
  } else if (type == "Digits") {
    BpeSplitStep step;
    step.regex = std::make_shared<PcreRegex>(
        j.value("individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)", false, path);
    steps->push_back(std::move(step));
  } else {
    Fail(path, ": unsupported pre_tokenizer type '", type,
         "' (supported: ByteLevel, Split, Digits, Sequence)");
  }
}

// BOS from a TemplateProcessing post-processor whose "single" template starts with a special
// token (Llama-3: <|begin_of_text|> $A).
std::optional<std::string> TemplateBosName(const json& j, std::optional<int32_t>* id) {
  if (!j.is_object()) return std::nullopt;
  const std::string type = j.value("type", "");
  if (type == "Sequence" && j.contains("processors")) {
    for (const json& p : j.at("processors")) {
      auto name = TemplateBosName(p, id);
      if (name) return name;
    }
    return std::nullopt;
  }
  if (type != "TemplateProcessing" || !j.contains("single")) return std::nullopt;
  const json& single = j.at("single");
  if (!single.is_array() || single.empty() || !single[0].contains("SpecialToken")) {
    return std::nullopt;
  }
  const std::string name = single[0].at("SpecialToken").at("id").get<std::string>();
  if (j.contains("special_tokens") && j.at("special_tokens").contains(name)) {
    const json& ids = j.at("special_tokens").at(name).at("ids");
    if (ids.is_array() && ids.size() == 1) {
      *id = ReadTokenId(ids[0], "post_processor special token '" + name + "'");
    }
  }
  return name;
}

// EOS candidates, in the order they are reported (primary end-of-text first, then chat
// end-of-turn tokens).
const char* const kEosNames[] = {"<|end_of_text|>", "<|endoftext|>", "<|eot_id|>",
                                 "<|eom_id|>",      "<|im_end|>",    "</s>"};

std::optional<int32_t> FindToken(const BpeConfig& config, const std::string& text) {
  for (const auto& t : config.added_tokens) {
    if (t.content == text) return t.id;
  }
  for (const auto& [v, id] : config.vocab) {
    if (v == text) return id;
  }
  return std::nullopt;
}

BpeConfig ParseHfTokenizerJson(const std::string& path) {
  const json root = ParseJsonFile(path, "HF tokenizer.json");
  SPECBED_CHECK(root.is_object(), path, ": expected a JSON object at the top level");
  BpeConfig config;
  config.source = path;
  try {
    SPECBED_CHECK(root.contains("model") && root.at("model").is_object(), path,
                  ": missing 'model' object");
    const json& model = root.at("model");
    const std::string type = model.value("type", "BPE");
    SPECBED_CHECK(type == "BPE", path, ": unsupported model type '", type,
                  "' (only byte-level BPE is supported)");
    for (const char* field : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      SPECBED_CHECK(!model.contains(field) || model.at(field).is_null() ||
                        model.at(field).get<std::string>().empty(),
                    path, ": BPE '", field, "' is not supported (byte-level BPE expected)");
    }
    // model.dropout is a training-time option and is ignored (encoding is deterministic).
    SPECBED_CHECK(model.contains("vocab") && model.at("vocab").is_object(), path,
                  ": model.vocab must be an object of token -> id");
    for (const auto& [token, id] : model.at("vocab").items()) {
      config.vocab.emplace_back(token,
                                ReadTokenId(id, StrCat(path, ": model.vocab entry '", token, "'")));
    }
    SPECBED_CHECK(model.contains("merges") && model.at("merges").is_array(), path,
                  ": model.merges must be an array");
    const json& merges = model.at("merges");
    config.merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      const json& m = merges[i];
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const size_t space = s.find(' ');
        SPECBED_CHECK(space != std::string::npos && space > 0 && space + 1 < s.size() &&
                          s.find(' ', space + 1) == std::string::npos,
                      path, ": merge #", i, " '", s, "' must be two tokens separated by a space");
        config.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        config.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      } else {
        Fail(path, ": merge #", i, " must be \"a b\" or [\"a\", \"b\"], got ", m.dump());
      }
    }
    config.ignore_merges = model.value("ignore_merges", false);

    ParseNormalizer(root.value("normalizer", json()), path, &config.nfc);
    const json pre = root.value("pre_tokenizer", json());
    bool has_byte_level = false;
    if (!pre.is_null()) ParsePreTokenizer(pre, path, &config.pre_tokenizer, &has_byte_level);
    SPECBED_CHECK(has_byte_level, path,
                  ": pre_tokenizer has no ByteLevel step; only byte-level BPE is supported");

    if (root.contains("added_tokens") && !root.at("added_tokens").is_null()) {
      const json& tokens = root.at("added_tokens");
      SPECBED_CHECK(tokens.is_array(), path, ": 'added_tokens' must be an array");
      for (size_t i = 0; i < tokens.size(); ++i) {
        const json& t = tokens[i];
        SPECBED_CHECK(t.is_object() && t.contains("id") && t.at("id").is_number_integer() &&
                          t.contains("content") && t.at("content").is_string(),
                      path, ": added_tokens[", i,
                      "] must be an object with an integer 'id' and a string 'content', got ",
                      t.dump());
        BpeAddedToken added;
        added.id = ReadTokenId(t.at("id"), StrCat(path, ": added_tokens[", i, "]"));
        added.content = t.at("content").get<std::string>();
        added.special = t.value("special", false);
        config.added_tokens.push_back(std::move(added));
      }
    }

    // BOS: TemplateProcessing's leading special token, else <|begin_of_text|>, else
    // <|endoftext|> when it is the only special added token (GPT-2 convention).
    std::optional<int32_t> template_id;
    if (auto name = TemplateBosName(root.value("post_processor", json()), &template_id)) {
      if (!template_id) template_id = FindToken(config, *name);
      SPECBED_CHECK(template_id.has_value(), path, ": post_processor template names BOS '", *name,
                    "', which is not a token");
      config.bos_id = *template_id;
    } else if (auto id = FindToken(config, "<|begin_of_text|>")) {
      config.bos_id = *id;
    } else {
      int special_count = 0;
      for (const auto& t : config.added_tokens) special_count += t.special ? 1 : 0;
      auto eot = FindToken(config, "<|endoftext|>");
      if (eot && special_count <= 1) config.bos_id = *eot;
    }
    for (const char* name : kEosNames) {
      if (auto id = FindToken(config, name)) config.eos_ids.push_back(*id);
    }
  } catch (const json::exception& e) {
    FailJsonException(e, path + " (tokenizer.json)");
  }
  return config;
}

}  // namespace

std::unique_ptr<Tokenizer> LoadHfTokenizer(const std::string& tokenizer_json_path) {
  return MakeBpeTokenizer(ParseHfTokenizerJson(tokenizer_json_path));
}

std::unique_ptr<Tokenizer> LoadGpt2Tokenizer(const std::string& vocab_json,
                                             const std::string& merges_txt) {
  BpeConfig config;
  config.source = vocab_json + " + " + merges_txt;
  config.merges_source = merges_txt;
  const json vocab = ParseJsonFile(vocab_json, "GPT-2 vocab.json object of token -> id");
  SPECBED_CHECK(vocab.is_object(), vocab_json, ": expected a JSON object of token -> id");
  for (const auto& [token, id] : vocab.items()) {
    config.vocab.emplace_back(token, ReadTokenId(id, StrCat(vocab_json, ": entry '", token, "'")));
  }
  const std::string merges_text = ReadFileToString(merges_txt);
  std::istringstream lines(merges_text);
  std::string line;
  int line_number = 0;
  while (std::getline(lines, line)) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    if (line_number == 1 && line.rfind("#version", 0) == 0) continue;
    const size_t space = line.find(' ');
    SPECBED_CHECK(space != std::string::npos && space > 0 && space + 1 < line.size() &&
                      line.find(' ', space + 1) == std::string::npos,
                  merges_txt, ":", line_number,
                  ": expected two tokens separated by one space, got '", line, "'");
    config.merges.emplace_back(line.substr(0, space), line.substr(space + 1));
    config.merge_lines.push_back(line_number);
  }
  BpeSplitStep split;
  split.regex = Gpt2Regex(merges_txt);
  config.pre_tokenizer.push_back(std::move(split));
  if (auto it = vocab.find("<|endoftext|>"); it != vocab.end()) {
    const int32_t id = ReadTokenId(*it, vocab_json + ": entry '<|endoftext|>'");
    config.added_tokens.push_back({id, "<|endoftext|>", /*special=*/true});
    config.bos_id = id;
    config.eos_ids = {id};
  }
  return MakeBpeTokenizer(std::move(config));
}

}  // namespace specbed
