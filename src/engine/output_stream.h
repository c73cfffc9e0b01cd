// Generated text on its way out of the engine: UTF-8-safe pieces, then
// (chat) the reasoning / content / tool-call split, then the stop strings on
// content.
#pragma once

#include <optional>
#include <string>

#include "chat/output_parser.h"
#include "engine/request.h"
#include "engine/stop_matcher.h"
#include "tokenizer/detokenizer.h"

namespace tern {

class OutputStream {
 public:
  OutputStream(const Tokenizer* tok, const Request& r)
      : parser_(r.in_reasoning, r.tools, r.tool_calls),
        stops_(r.stop),
        chat_(r.output == Request::Output::chat) {
    if (tok) decoder_.emplace(*tok);
  }
  void push(int32_t id, Delta& d) { route(decoder_ ? decoder_->push(id) : std::string(), d); }
  bool stopped() const { return stops_.stopped(); }
  const std::string& stop_sequence() const { return stops_.matched(); }
  // End of generation: what the decoder, parser and stop matcher held.
  void finish(Delta& d) {
    if (decoder_) route(decoder_->finish(), d);
    if (stops_.stopped()) return;
    if (chat_) {
      ParsedDelta rest = parser_.finish();
      rest.content = stops_.push(rest.content);
      d.chat.append(std::move(rest));
      if (!stops_.stopped()) d.chat.content += stops_.finish();
    } else {
      d.text += stops_.finish();
    }
  }

 private:
  void route(const std::string& text, Delta& d) {
    if (text.empty() || stops_.stopped()) return;
    if (!chat_) {
      d.text += stops_.push(text);
      return;
    }
    ParsedDelta p = parser_.push(text);
    p.content = stops_.push(p.content);
    d.chat.append(std::move(p));
  }

  std::optional<StreamDecoder> decoder_;
  OutputParser parser_;
  StopMatcher stops_;
  bool chat_;
};

}  // namespace tern
