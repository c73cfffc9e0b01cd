#include "server/responses_request.h"

namespace tern::server {

namespace {

// Input items with each item_reference replaced by the stored output item
// it names (clients that store responses refer to them instead of
// re-sending; the Vercel AI SDK does).
ojson resolve_references(const ojson& input, ResponseStore& store) {
  if (!input.is_array()) return input;
  ojson out = ojson::array();
  for (size_t i = 0; i < input.size(); ++i) {
    const Fields it(input[i], element("input", i));
    if (it.string("type").value_or("") != "item_reference") {
      out.push_back(input[i]);
      continue;
    }
    const auto id = it.string("id");
    if (!id) bad_request(it.name("id"), "'{}' is required", it.name("id"));
    auto item = store.item(*id);
    if (!item) throw ApiError(404, fmt::format("Item with id '{}' not found.", *id), it.name("id"));
    out.push_back(std::move(*item));
  }
  return out;
}

// Input items as chat messages appended to `out`.
void add_items(ojson& out, const ojson& input) {
  if (input.is_string()) {
    out.push_back({{"role", "user"}, {"content", input.get<std::string>()}});
    return;
  }
  if (!input.is_array()) bad_request("input", "'input' must be a string or a list of items");
  std::string reasoning;  // a reasoning item goes with the assistant turn after it
  auto assistant = [&]() -> ojson& {
    if (out.empty() || out.back()["role"] != "assistant")
      out.push_back({{"role", "assistant"}, {"content", ""}});
    if (!reasoning.empty()) out.back()["reasoning_content"] = std::exchange(reasoning, "");
    return out.back();
  };
  for (size_t i = 0; i < input.size(); ++i) {
    const Fields it(input[i], element("input", i));
    const std::string type = it.string("type").value_or("message");
    if (type == "message") {
      std::string role = it.string("role").value_or("");
      if (role == "developer") role = "system";
      if (role != "user" && role != "assistant" && role != "system")
        bad_request(it.name("role"), "'{}' must be user, assistant, system or developer",
                    it.name("role"));
      const ojson* c = it.get("content");
      ojson msg = {
          {"role", role},
          {"content",
           c ? parts_text(*c, it.name("content"), {"input_text", "output_text", "text"}) : ""}};
      if (role == "assistant" && !reasoning.empty())
        msg["reasoning_content"] = std::exchange(reasoning, "");
      out.push_back(std::move(msg));
    } else if (type == "function_call") {
      ojson& a = assistant();
      if (!a.contains("tool_calls")) a["tool_calls"] = ojson::array();
      std::string name = it.string("name").value_or("");
      if (auto ns = it.string("namespace"); ns && !ns->empty()) name = flat_tool_name(*ns, name);
      const ojson call = {
          {"function", {{"name", name}, {"arguments", it.string("arguments").value_or("{}")}}}};
      a["tool_calls"].push_back(tool_calls_of(ojson::array({call}), it.name("arguments"))[0]);
    } else if (type == "function_call_output") {
      const ojson* o = it.get("output");
      out.push_back(
          {{"role", "tool"},
           {"content",
            o ? parts_text(*o, it.name("output"), {"input_text", "output_text", "text"}) : ""}});
    } else if (type == "reasoning") {
      if (const ojson* c = it.array("content"))
        for (const ojson& p : *c) reasoning += p.value("text", "");
    } else {
      bad_request(it.name("type"), "'{}': input items of type '{}' are not supported",
                  it.name("type"), type);
    }
  }
}

// A Responses function tool ({type, name, description, parameters}) in
// chat completions' shape, under `name`.
ojson function_tool(const Fields& t, const std::string& name) {
  ojson fn = {{"name", name}, {"description", t.string("description").value_or("")}};
  if (const ojson* p = t.object("parameters")) fn["parameters"] = *p;
  return {{"type", "function"}, {"function", fn}};
}

// Function tools, namespaces' functions flattened; other types (web search,
// custom, ...) skipped with one warning per type.
ojson function_tools(const ojson& tools, ResponsesRequest& r) {
  ojson fns = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const Fields t(tools[i], element("tools", i));
    const std::string type = t.string("type").value_or("");
    if (type == "function") {
      fns.push_back(function_tool(t, t.string("name").value_or("")));
    } else if (type == "namespace") {
      const std::string ns = t.string("name").value_or("");
      const ojson* inner = t.array("tools");
      for (size_t j = 0; inner && j < inner->size(); ++j) {
        const Fields f((*inner)[j], element(t.name("tools"), j));
        if (f.string("type").value_or("function") != "function") continue;
        const std::string name = f.string("name").value_or("");
        const std::string flat = flat_tool_name(ns, name);
        r.namespaced[flat] = {ns, name};
        fns.push_back(function_tool(f, flat));
      }
    } else {
      warn_once("responses tool type " + type,
                "responses: tools of type '{}' are skipped (function and namespace tools only)",
                type);
    }
  }
  return fns;
}

}  // namespace

std::string flat_tool_name(const std::string& ns, const std::string& name) {
  const size_t ns_end = ns.find_last_not_of('_'), name_start = name.find_first_not_of('_');
  return ns.substr(0, ns_end == std::string::npos ? 0 : ns_end + 1) + "__" +
         (name_start == std::string::npos ? "" : name.substr(name_start));
}

ResponsesRequest parse_responses_request(const ojson& body, const ApiContext& ctx,
                                         ResponseStore& store) {
  const Fields f(body, "");
  ResponsesRequest r;
  r.model = check_model(f, ctx);
  if (auto prev = f.string("previous_response_id")) {
    auto stored = store.get(*prev);
    if (!stored)
      throw ApiError(404, "Previous response with id '" + *prev + "' not found.",
                     "previous_response_id");
    r.conversation = *stored;
    r.previous = *prev;
  } else {
    r.conversation = ojson::array();
  }
  const ojson* input = f.get("input");
  if (!input) bad_request("input", "'input' is required");
  add_items(r.conversation, resolve_references(*input, store));
  ChatSpec c;
  if (auto instr = f.string("instructions"))
    c.messages.push_back({{"role", "system"}, {"content", *instr}});
  for (const ojson& m : r.conversation) c.messages.push_back(m);
  if (const ojson* tools = f.array("tools")) {
    const ojson fns = function_tools(*tools, r);
    if (!fns.empty()) c.tools = parse_tools(fns, "tools");
  }
  c.choice = openai_tool_choice(f);
  if (const ojson* rs = f.object("reasoning"))
    if (auto effort = Fields(*rs, "reasoning").string("effort"); effort && *effort == "none")
      c.thinking = false;
  if (const ojson* text = f.object("text"))
    if (const ojson* fmt = Fields(*text, "text").object("format"))
      parse_response_format(c, *fmt, "text.format");
  render_chat_into(r.req, c, ctx);
  r.req.sampling = parse_sampling(f);
  fit_context(r.req, f.integer("max_output_tokens", 1, INT32_MAX), "max_output_tokens", ctx,
              ErrorStyle::openai);
  r.stream = f.boolean("stream").value_or(false);
  r.store = f.boolean("store").value_or(true);
  return r;
}

}  // namespace tern::server
