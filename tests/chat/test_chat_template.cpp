// The native Qwen3.5 chat template against the fixture renderings, the
// conversations it rejects, and the Python formatting it reproduces.
#include <gtest/gtest.h>

#include "chat/chat_template.h"
#include "chat/python_format.h"
#include "tokenizer/test_util.h"

namespace tern {
namespace {

using ojson = nlohmann::ordered_json;

std::string render(const std::string& request_json) {
  return render_chat(ojson::parse(request_json));
}

std::string rejection(const std::string& request_json) {
  try {
    render(request_json);
  } catch (const ChatTemplateError& e) {
    return e.what();
  }
  return "(rendered)";
}

TEST(ChatTemplate, FixtureCases) {
  auto lines = test::read_lines(test::data("chat-template/cases.jsonl"));
  ASSERT_EQ(lines.size(), 17u);
  for (const auto& line : lines) {
    ojson c = ojson::parse(line);
    EXPECT_EQ(render_chat(c), c["expected"].get<std::string>()) << c["name"];
  }
}

TEST(ChatTemplate, RecognisesTheQwen35Source) {
  EXPECT_TRUE(is_qwen35_chat_template(test::read_file(test::data("chat-template/qwen3.5.jinja"))));
  EXPECT_FALSE(is_qwen35_chat_template(test::read_file(test::data("chat-template/qwen3.jinja"))));
}

TEST(ChatTemplate, RejectsWhatTheTemplateRejects) {
  EXPECT_EQ(rejection(R"({"messages": []})"), "No messages provided.");
  EXPECT_EQ(rejection(R"({})"), "No messages provided.");
  EXPECT_EQ(
      rejection(
          R"({"messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "b"}]})"),
      "System message must be at the beginning.");
  EXPECT_EQ(rejection(R"({"messages": [{"role": "system", "content": "b"}]})"),
            "No user query found in messages.");
  EXPECT_EQ(
      rejection(
          R"({"messages": [{"role": "user", "content": "<tool_response>x</tool_response>"}]})"),
      "No user query found in messages.");
  EXPECT_EQ(
      rejection(
          R"({"messages": [{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}]})"),
      "Unexpected message role.");
  EXPECT_EQ(rejection(R"({"messages": [{"role": "user", "content": 5}]})"),
            "Unexpected content type.");
  EXPECT_EQ(rejection(R"({"messages": [{"role": "user", "content": [{"kind": "x"}]}]})"),
            "Unexpected item type in content.");
  EXPECT_EQ(rejection(R"({"messages": [{"role": "system", "content": [{"type": "image"}]},
      {"role": "user", "content": "a"}], "tools": [{"name": "f"}]})"),
            "System message cannot contain images.");
  EXPECT_EQ(rejection(R"({"messages": [{"role": "user", "content": "a"},
      {"role": "assistant", "tool_calls": [{"function": {"arguments": {}}}]}]})"),
            "Tool call has no function name.");
  EXPECT_EQ(rejection(R"({"messages": [{"role": "user", "content": "a"},
      {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]}]})"),
            "Tool call arguments must be a JSON object or a string holding one.");
}

TEST(ChatTemplate, ArgumentsAsJsonStringRenderLikeAnObject) {
  const char* obj =
      R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "",
      "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"x": 1, "y": [1, "é"], "z": true}}}]}]})";
  const char* str =
      R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "",
      "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{\"x\": 1, \"y\": [1, \"é\"], \"z\": true}"}}]}]})";
  std::string out = render(obj);
  EXPECT_EQ(out, render(str));
  EXPECT_NE(out.find("<parameter=x>\n1\n</parameter>\n<parameter=y>\n[1, \"é\"]\n</parameter>\n"
                     "<parameter=z>\nTrue\n</parameter>\n"),
            std::string::npos)
      << out;
}

TEST(ChatTemplate, ContentPartsVisionAndReasoning) {
  std::string out = render(R"({"messages": [
      {"role": "user", "content": [{"type": "text", "text": "look "}, {"type": "image"}, {"video": "v.mp4"}]},
      {"role": "assistant", "content": "  <think>\n\nhmm\n\n</think>\n\nok  ", "reasoning_content": null},
      {"role": "tool", "content": "r1"}, {"role": "tool", "content": "r2"}],
      "add_vision_id": true})");
  EXPECT_EQ(out,
            "<|im_start|>user\nlook Picture 1: <|vision_start|><|image_pad|><|vision_end|>"
            "Video 1: <|vision_start|><|video_pad|><|vision_end|><|im_end|>\n"
            "<|im_start|>assistant\n<think>\nhmm\n</think>\n\nok<|im_end|>\n"
            "<|im_start|>user\n<tool_response>\nr1\n</tool_response>\n<tool_response>\nr2\n"
            "</tool_response><|im_end|>\n");
}

TEST(PythonFormat, MatchesPython) {
  EXPECT_EQ(py::float_repr(1.0), "1.0");
  EXPECT_EQ(py::float_repr(0.1), "0.1");
  EXPECT_EQ(py::float_repr(-2.5e-7), "-2.5e-07");
  EXPECT_EQ(py::float_repr(1e16), "1e+16");
  EXPECT_EQ(py::float_repr(1234567890123456.0), "1234567890123456.0");
  EXPECT_EQ(py::float_repr(0.0001), "0.0001");
  EXPECT_EQ(py::float_repr(1e22), "1e+22");
  EXPECT_EQ(py::float_repr(-0.0), "-0.0");
  ojson v = ojson::parse(R"({"b": [true, null, 1.5, "it's"], "a": {"q": "\"x\"\n"}})");
  EXPECT_EQ(py::str(v), R"({'b': [True, None, 1.5, "it's"], 'a': {'q': '"x"\n'}})");
  EXPECT_EQ(py::json_dumps(v), R"({"b": [true, null, 1.5, "it's"], "a": {"q": "\"x\"\n"}})");
  EXPECT_EQ(py::json_dumps(ojson("é\x01\x7f")), "\"é\\u0001\x7f\"");
  EXPECT_EQ(py::strip("\x1c \t\u3000x y\u0085\u00a0"), "x y");
  EXPECT_EQ(py::strip("\ufeffx"), "\ufeffx");
}

}  // namespace
}  // namespace tern
