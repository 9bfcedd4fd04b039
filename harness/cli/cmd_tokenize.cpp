// `specbed tokenize`: text -> ids (and back) with a model's tokenizer or any tokenizer file.
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"
#include "base/json_read.h"
#include "harness/cli/commands.h"
#include "models/model_registry.h"
#include "models/tokenizer/tokenizer.h"

namespace specbed::cli {
namespace {

struct TokenizeOptions {
  std::string model = "stories260K";
  std::string tokenizer;
  std::string text;
  std::string decode;
  bool bos = false;
  bool no_special = false;
  bool json = false;
};

// Text of `ids` as a user reads it: special tokens skipped, and decoded as a continuation of BOS,
// so llama2.c's dummy-prefix space disappears exactly as it does after a real BOS.
std::string DisplayText(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::string text;
  int32_t prev = tok.bos_id();
  for (int32_t id : ids) {
    text += tok.DecodeNext(prev, id, /*skip_special=*/true);
    prev = id;
  }
  return text;
}

std::vector<int32_t> ParseIds(const std::string& s) {
  std::vector<int32_t> ids;
  std::string item;
  std::stringstream in(s);
  while (std::getline(in, item, ',')) {
    const auto b = item.find_first_not_of(" \t[]");
    const auto e = item.find_last_not_of(" \t[]");
    if (b == std::string::npos) continue;
    const std::string v = item.substr(b, e - b + 1);
    try {
      size_t used = 0;
      const long id = std::stol(v, &used);
      SPECBED_CHECK(used == v.size(), "--decode: '", v, "' is not an integer token id");
      ids.push_back(static_cast<int32_t>(id));
    } catch (const std::logic_error&) {
      Fail("--decode: '", v, "' is not an integer token id");
    }
  }
  return ids;
}

void RunTokenize(const TokenizeOptions& o) {
  std::shared_ptr<Tokenizer> tok;
  if (!o.tokenizer.empty()) {
    tok = LoadTokenizer(o.tokenizer);
  } else {
    const ModelSpec spec = ResolveModel(o.model);
    tok = LoadModelTokenizer(spec);
    SPECBED_CHECK(tok != nullptr, "model '", o.model, "' has no tokenizer (looked in '", spec.path,
                  "' for tokenizer.json, vocab.json + merges.txt, tokenizer.bin)");
  }
  if (!o.decode.empty()) {
    SPECBED_CHECK(o.text.empty(), "tokenize: --decode turns ids into text; the text '", o.text,
                  "' would be ignored (give either a text to encode or --decode IDS)");
    const std::vector<int32_t> ids = ParseIds(o.decode);
    for (int32_t id : ids) {
      SPECBED_CHECK(id >= 0 && id < tok->vocab_size(), "--decode: token id ", id,
                    " outside the vocabulary [0, ", tok->vocab_size(), ")");
    }
    const std::string text = DisplayText(*tok, ids);
    if (o.json) {
      std::cout << DumpJsonForOutput({{"ids", ids}, {"text", text}}) << std::endl;
    } else {
      std::cout << text << std::endl;
    }
    return;
  }
  EncodeOptions options;
  options.add_bos = o.bos;
  options.parse_special = !o.no_special;
  const std::vector<int32_t> ids = tok->Encode(o.text, options);
  std::vector<std::string> pieces;
  for (int32_t id : ids) pieces.push_back(tok->TokenText(id));
  const std::string round_trip = DisplayText(*tok, ids);
  if (o.json) {
    nlohmann::json j = {{"text", o.text},
                        {"ids", ids},
                        {"tokens", pieces},
                        {"decoded", round_trip},
                        {"n_tokens", ids.size()}};
    std::cout << DumpJsonForOutput(j) << std::endl;
    return;
  }
  for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
  std::cout << "\n";
  for (size_t i = 0; i < ids.size(); ++i) {
    std::cout << (i ? " | " : "") << DumpJsonForOutput(pieces[i], -1);
  }
  std::cout << "\n" << ids.size() << " tokens\n";
}

}  // namespace

void AddTokenizeCommand(CLI::App& app) {
  auto [cmd, o] =
      AddSubcommand(&app, "tokenize", RunTokenize, "Text -> token ids (or --decode ids -> text)");
  cmd->add_option("text", o->text, "Text to encode");
  OldSpellings(
      cmd,
      cmd->add_option("-t,--target", o->model, "Use this model's tokenizer")->capture_default_str(),
      {"-m", "--model"});
  cmd->add_option(
      "--tokenizer", o->tokenizer,
      "A tokenizer file/dir instead (tokenizer.json, vocab.json+merges.txt dir, or llama2.c .bin)");
  cmd->add_option("--decode", o->decode, "Comma-separated token ids to decode instead of encoding");
  cmd->add_flag("--bos", o->bos, "Prepend BOS");
  cmd->add_flag("--no-special", o->no_special, "Treat special-token text as plain text");
  cmd->add_flag("--json", o->json, "Print JSON");
}

}  // namespace specbed::cli
