// Stop rules shared by AR and every speculative method, so outputs are comparable token for
// token: stop on an EOS id (not emitted), after max_new_tokens, when the decoded text contains a
// stop string (the token completing it is kept; the text is cut before the stop string), or when
// the context is full. A method that emits several tokens per step feeds them one at a time.
// Checked by: tests/engine/generation_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/tokenizer/tokenizer.h"

namespace specbed {

// The most new tokens one generation may ask for (the CLI's -n bound too); a larger
// max_new_tokens is an error naming the field, not an allocation failure.
constexpr int64_t kMaxNewTokensLimit = int64_t{1} << 20;

enum class StopReason { kNone, kEos, kMaxNewTokens, kStopString, kMaxContext };
const char* StopReasonName(StopReason reason);

struct StopConfig {
  int64_t max_new_tokens = 128;
  bool stop_on_eos = true;
  std::vector<int32_t> eos_ids;
  std::vector<std::string> stop_strings;
};

class StopChecker {
 public:
  // `tokenizer` may be null when there are no stop strings.
  StopChecker(const StopConfig& config, const Tokenizer* tokenizer, int32_t last_prompt_token);

  // Offers the next generated token. Returns kNone when generation continues (the token was
  // appended), otherwise why it stopped (an EOS token is not appended).
  StopReason Push(int32_t token);
  // Marks the stop for a full context (the caller could not run another forward).
  void StopForContext() { reason_ = StopReason::kMaxContext; }

  const std::vector<int32_t>& tokens() const { return tokens_; }
  // Decoded text, cut before a stop string when one matched.
  std::string text() const;
  StopReason reason() const { return reason_; }
  bool stopped() const { return reason_ != StopReason::kNone; }

 private:
  StopConfig config_;
  const Tokenizer* tokenizer_;
  int32_t prev_token_;
  std::vector<int32_t> tokens_;
  std::string text_;
  size_t stop_at_ = std::string::npos;
  size_t max_stop_len_ = 0;
  StopReason reason_ = StopReason::kNone;
};

}  // namespace specbed
