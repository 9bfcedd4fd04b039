// Tests for chat prompt formats (models/tokenizer/chat_template.cpp): exact strings for a
// 2-turn conversation in each format, names, stop strings and errors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"
#include "models/tokenizer/chat_template.h"

namespace specbed {
namespace {

const std::vector<ChatMessage> kTwoTurns = {
    {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Bye"}};
const std::vector<ChatMessage> kTwoTurnsWithSystem = {
    {"system", "You are helpful."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Bye"}};

TEST(ChatTemplateTest, Llama3) {
  EXPECT_EQ(ApplyChatTemplate(ChatTemplate::kLlama3, kTwoTurnsWithSystem, true),
            "<|begin_of_text|>"
            "<|start_header_id|>system<|end_header_id|>\n\nYou are helpful.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(ApplyChatTemplate(ChatTemplate::kLlama3, kTwoTurns, false),
            "<|begin_of_text|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>");
  // Meta's template trims message content.
  EXPECT_EQ(ApplyChatTemplate(ChatTemplate::kLlama3, {{"user", "  Hi \n"}}, false),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
  EXPECT_TRUE(ChatTemplateIncludesBos(ChatTemplate::kLlama3));
}

TEST(ChatTemplateTest, ChatMl) {
  EXPECT_EQ(ApplyChatTemplate(ChatTemplate::kChatMl, kTwoTurnsWithSystem, true),
            "<|im_start|>system\nYou are helpful.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello!<|im_end|>\n"
            "<|im_start|>user\nBye<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(ApplyChatTemplate(ChatTemplate::kChatMl, kTwoTurns, false),
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello!<|im_end|>\n"
            "<|im_start|>user\nBye<|im_end|>\n");
  EXPECT_FALSE(ChatTemplateIncludesBos(ChatTemplate::kChatMl));
}

TEST(ChatTemplateTest, VicunaV11) {
  const std::string system =
      "A chat between a curious user and an artificial intelligence assistant. The assistant "
      "gives helpful, detailed, and polite answers to the user's questions.";
  EXPECT_EQ(ApplyChatTemplate(ChatTemplate::kVicuna, kTwoTurns, true),
            system + " USER: Hi ASSISTANT: Hello!</s>USER: Bye ASSISTANT:");
  EXPECT_EQ(ApplyChatTemplate(ChatTemplate::kVicuna, kTwoTurns, false),
            system + " USER: Hi ASSISTANT: Hello!</s>USER: Bye ");
  EXPECT_EQ(ApplyChatTemplate(ChatTemplate::kVicuna, kTwoTurnsWithSystem, true),
            "You are helpful. USER: Hi ASSISTANT: Hello!</s>USER: Bye ASSISTANT:");
  EXPECT_THROW(ApplyChatTemplate(ChatTemplate::kVicuna, {{"user", "a"}, {"system", "b"}}, true),
               Error);
  EXPECT_FALSE(ChatTemplateIncludesBos(ChatTemplate::kVicuna));
}

TEST(ChatTemplateTest, Raw) {
  EXPECT_EQ(ApplyChatTemplate(ChatTemplate::kRaw, kTwoTurnsWithSystem, true),
            "You are helpful.\nHi\nHello!\nBye");
  EXPECT_EQ(ApplyChatTemplate(ChatTemplate::kRaw, {{"user", "Once upon a time"}}, true),
            "Once upon a time");
  EXPECT_EQ(ApplyChatTemplate(ChatTemplate::kRaw, {}, true), "");
}

TEST(ChatTemplateTest, NamesAndStopStrings) {
  for (const std::string& name : ChatTemplateNames()) {
    EXPECT_EQ(ChatTemplateName(ChatTemplateFromName(name)), name);
  }
  EXPECT_EQ(ChatTemplateNames(), (std::vector<std::string>{"raw", "llama3", "chatml", "vicuna"}));
  EXPECT_EQ(ChatTemplateFromName("qwen"), ChatTemplate::kChatMl);
  EXPECT_EQ(ChatTemplateStopStrings(ChatTemplate::kLlama3)[0], "<|eot_id|>");
  EXPECT_EQ(ChatTemplateStopStrings(ChatTemplate::kChatMl)[0], "<|im_end|>");
  EXPECT_EQ(ChatTemplateStopStrings(ChatTemplate::kVicuna),
            (std::vector<std::string>{"</s>", "USER:"}));
  EXPECT_TRUE(ChatTemplateStopStrings(ChatTemplate::kRaw).empty());
}

TEST(ChatTemplateTest, UnknownNameListsKnownNames) {
  try {
    ChatTemplateFromName("chatm1");
    FAIL() << "expected specbed::Error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("unknown chat template 'chatm1'"), std::string::npos) << message;
    EXPECT_NE(message.find("did you mean 'chatml'"), std::string::npos) << message;
    for (const char* name : {"raw", "llama3", "vicuna", "qwen"}) {
      EXPECT_NE(message.find(name), std::string::npos) << message;
    }
  }
}

TEST(ChatTemplateTest, UnknownRole) {
  EXPECT_THROW(ApplyChatTemplate(ChatTemplate::kChatMl, {{"tool", "x"}}, true), Error);
  EXPECT_THROW(ApplyChatTemplate(ChatTemplate::kLlama3, {{"User", "x"}}, true), Error);
}

}  // namespace
}  // namespace specbed
