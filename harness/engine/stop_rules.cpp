// Stop rules shared by all decoding methods.
#include "harness/engine/stop_rules.h"

#include <algorithm>

#include "base/enum_names.h"
#include "base/error.h"

namespace specbed {

const char* StopReasonName(StopReason reason) {
  static constexpr EnumName<StopReason> kNames[] = {{StopReason::kNone, "none"},
                                                    {StopReason::kEos, "eos"},
                                                    {StopReason::kMaxNewTokens, "max_new_tokens"},
                                                    {StopReason::kStopString, "stop_string"},
                                                    {StopReason::kMaxContext, "max_context"}};
  return EnumNameOf(kNames, reason, "unknown");
}

StopChecker::StopChecker(const StopConfig& config, const Tokenizer* tokenizer,
                         int32_t last_prompt_token)
    : config_(config), tokenizer_(tokenizer), prev_token_(last_prompt_token) {
  SPECBED_CHECK(config_.max_new_tokens >= 1 && config_.max_new_tokens <= kMaxNewTokensLimit,
                "max_new_tokens must be in [1, ", kMaxNewTokensLimit, "], got ",
                config_.max_new_tokens);
  SPECBED_CHECK(config_.stop_strings.empty() || tokenizer_ != nullptr,
                "stop strings need a tokenizer");
  for (const auto& s : config_.stop_strings) {
    SPECBED_CHECK(!s.empty(), "stop strings must be non-empty");
    max_stop_len_ = std::max(max_stop_len_, s.size());
  }
  // Generations usually stop long before max_new_tokens; larger ones grow the buffer.
  tokens_.reserve(std::min<int64_t>(config_.max_new_tokens, 4096));
}

StopReason StopChecker::Push(int32_t token) {
  if (reason_ != StopReason::kNone) return reason_;
  if (config_.stop_on_eos &&
      std::find(config_.eos_ids.begin(), config_.eos_ids.end(), token) != config_.eos_ids.end()) {
    reason_ = StopReason::kEos;
    return reason_;
  }
  tokens_.push_back(token);
  if (tokenizer_ != nullptr) {
    const size_t before = text_.size();
    text_ += tokenizer_->DecodeNext(prev_token_, token, /*skip_special=*/false);
    if (max_stop_len_ > 0) {
      // Only the window that the new bytes can complete needs searching.
      const size_t from = before >= max_stop_len_ ? before - max_stop_len_ + 1 : 0;
      for (const auto& s : config_.stop_strings) {
        const size_t at = text_.find(s, from);
        if (at != std::string::npos && at < stop_at_) stop_at_ = at;
      }
      if (stop_at_ != std::string::npos) reason_ = StopReason::kStopString;
    }
  }
  prev_token_ = token;
  if (reason_ == StopReason::kNone &&
      static_cast<int64_t>(tokens_.size()) >= config_.max_new_tokens) {
    reason_ = StopReason::kMaxNewTokens;
  }
  return reason_;
}

std::string StopChecker::text() const {
  return stop_at_ == std::string::npos ? text_ : text_.substr(0, stop_at_);
}

}  // namespace specbed
