// tern cache: the disk cache's directory (engine/disk_cache.h) without a
// model: list its entries (what each holds and what it is bound to), verify
// them (every byte against its hash, every piece's parent present), clear it.
#include <fmt/chrono.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "engine/disk_cache.h"

namespace tern::cli {

namespace {

namespace fs = std::filesystem;

struct CacheCmd {
  std::string dir;
  bool remove = false;
};

struct Listed {
  std::string file;
  std::optional<EntryHeader> header;  // none: damaged
  std::string problem;
  uint64_t bytes = 0;
  std::time_t mtime = 0;
};

std::string human(double bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  for (; bytes >= 1000 && u < 4; ++u) bytes /= 1000;
  return fmt::format("{:.1f} {}", bytes, units[u]);
}

// The directory's entries in name order; with `full`, every byte checked.
std::vector<Listed> scan(const std::string& dir, bool full) {
  if (!fs::is_directory(dir)) fail("no cache directory at {}", dir);
  std::vector<Listed> out;
  for (const auto& d : fs::directory_iterator(dir)) {
    const std::string name = d.path().filename().string();
    if (!parse_entry_name(name)) continue;
    Listed l{d.path().string(), {}, {}, 0, 0};
    struct stat st {};
    if (::stat(l.file.c_str(), &st) == 0) l.bytes = uint64_t(st.st_size), l.mtime = st.st_mtime;
    try {
      EntryReader r(l.file);
      if (entry_name(r.header().kind, r.header().key) != name)
        fail("{}: its header names another entry", l.file);
      if (full) {
        std::vector<std::byte> buf(size_t(1) << 20);
        for (uint64_t left = r.header().file_bytes() - r.header().data_offset(); left > 0;) {
          const size_t n = size_t(std::min<uint64_t>(left, buf.size()));
          r.read(std::span(buf).first(n));
          left -= n;
        }
        r.finish();
      }
      l.header = r.header();
    } catch (const Error& e) {
      l.problem = e.what();
    }
    out.push_back(std::move(l));
  }
  std::sort(out.begin(), out.end(),
            [](const Listed& a, const Listed& b) { return a.file < b.file; });
  return out;
}

// Marks what cannot be restored: a piece whose parent is missing (or
// incomplete itself), a state without its KV.
void mark_incomplete(std::vector<Listed>& entries) {
  std::map<std::pair<uint64_t, uint64_t>, Listed*> kv;  // (binding, key)
  for (Listed& l : entries)
    if (l.header && l.header->kind == EntryKind::kv) kv[{l.header->binding, l.header->key}] = &l;
  auto complete = [&](uint64_t binding, uint64_t key) {
    for (int hops = 0; hops <= int(kv.size()); ++hops) {
      const auto it = kv.find({binding, key});
      if (it == kv.end() || !it->second->header) return false;
      if (it->second->header->start == 0) return true;
      key = it->second->header->parent;
    }
    return false;
  };
  for (Listed& l : entries)
    if (l.header && !complete(l.header->binding, l.header->key))
      l.problem = l.file + ": incomplete (an earlier piece is missing)";
}

int list(const CacheCmd& o) {
  std::vector<Listed> entries = scan(o.dir, false);
  mark_incomplete(entries);
  std::map<uint64_t, std::string> bindings;
  uint64_t total = 0, restorable = 0;
  std::printf("%-24s %-6s %15s %12s  %-19s  %s\n", "FILE", "KIND", "POSITIONS", "BYTES",
              "LAST USED", "BOUND TO");
  for (const Listed& l : entries) {
    total += l.bytes;
    const std::string name = fs::path(l.file).filename().string();
    const std::string when = fmt::format("{:%Y-%m-%d %H:%M:%S}", fmt::localtime(l.mtime));
    if (!l.header) {
      std::printf("%-24s damaged: %s\n", name.c_str(), l.problem.c_str());
      continue;
    }
    const EntryHeader& h = *l.header;
    bindings[h.binding] = h.binding_text;
    if (h.kind == EntryKind::state && l.problem.empty()) ++restorable;
    const std::string span = fmt::format("{}-{}", h.start, h.end);
    std::printf("%-24s %-6s %15s %12s  %-19s  %s%s\n", name.c_str(), kind_name(h.kind),
                span.c_str(), human(double(l.bytes)).c_str(), when.c_str(),
                hex64(h.binding).c_str(), l.problem.empty() ? "" : "  (incomplete)");
  }
  for (const auto& [hash, text] : bindings)
    std::printf("%s: %s\n", hex64(hash).c_str(), text.c_str());
  std::printf("%s: %zu files, %s; %llu restorable prefixes\n", o.dir.c_str(), entries.size(),
              human(double(total)).c_str(), static_cast<unsigned long long>(restorable));
  return 0;
}

int verify(const CacheCmd& o) {
  std::unique_ptr<CacheDirLock> lock;
  if (o.remove) lock = std::make_unique<CacheDirLock>(o.dir);  // no server writing meanwhile
  std::vector<Listed> entries = scan(o.dir, true);
  mark_incomplete(entries);
  size_t bad = 0;
  for (const Listed& l : entries) {
    if (l.problem.empty()) continue;
    ++bad;
    std::printf("%s%s\n", l.problem.c_str(), o.remove ? " (removed)" : "");
    if (o.remove) fs::remove(l.file);
  }
  std::printf("%s: %zu files, %zu intact, %zu damaged or incomplete\n", o.dir.c_str(),
              entries.size(), entries.size() - bad, bad);
  return bad == 0 ? 0 : 1;
}

int clear(const CacheCmd& o) {
  if (!fs::is_directory(o.dir)) fail("no cache directory at {}", o.dir);
  CacheDirLock lock(o.dir);
  size_t n = 0;
  uintmax_t bytes = 0;
  for (const auto& d : fs::directory_iterator(o.dir)) {
    const std::string name = d.path().filename().string();
    if (!parse_entry_name(name) && !name.starts_with(kTempPrefix)) continue;
    bytes += d.is_regular_file() ? d.file_size() : 0;
    fs::remove(d.path());
    ++n;
  }
  std::printf("%s: removed %zu files, %s\n", o.dir.c_str(), n, human(double(bytes)).c_str());
  return 0;
}

}  // namespace

Runner add_cache(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "cache", "List, verify or clear a disk cache directory (tern serve/chat --cache-dir)");
  cmd->require_subcommand(1);
  cmd->footer(
      "A disk cache directory holds two kinds of files, named by a hash of the token ids they\n"
      "follow: HASH.kv (the KV cache rows of a span of positions, and the id of the piece before\n"
      "it) and HASH.state (the recurrent and conv state after a prefix). Each holds the token\n"
      "ids it covers (no text, but ids decode to text with the model's tokenizer: treat the\n"
      "directory as the conversations themselves), a header binding it to one model, backend\n"
      "numerics, prefill plan and tern build, and a checksum. A server removes entries bound\n"
      "to anything else at start. docs/serving.md, \"Disk cache\".");
  auto o = std::make_shared<CacheCmd>();
  auto dir_option = [&](CLI::App* sub) {
    sub->add_option("--cache-dir", o->dir,
                    "The directory (default $XDG_CACHE_HOME/tern/sessions or "
                    "~/.cache/tern/sessions)");
  };
  auto* ls = cmd->add_subcommand("list", "Each entry: kind, positions, size, last use, binding");
  auto* check = cmd->add_subcommand(
      "verify", "Read every entry whole against its checksum; exit 1 when one is damaged");
  check->add_flag("--remove", o->remove, "Remove damaged and incomplete entries");
  auto* rm = cmd->add_subcommand("clear", "Remove every entry (not while a server uses it)");
  for (CLI::App* sub : {ls, check, rm}) dir_option(sub);
  return [o, ls, check] {
    if (o->dir.empty()) o->dir = default_cache_dir();
    if (ls->parsed()) return list(*o);
    if (check->parsed()) return verify(*o);
    return clear(*o);
  };
}

}  // namespace tern::cli
