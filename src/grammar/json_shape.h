// JSON Schema documents read into Shapes: the constraints of one schema
// position with $ref resolved and allOf merged (exactly: a property one side
// does not list falls under that side's additionalProperties), anyOf/oneOf
// kept as groups of branches. Every keyword is checked; an unsupported one
// is an Error naming it and where it is, or, for a lenient document (tool
// schemas), dropped and noted (dropped()) so that the value is less
// constrained, never refused. A small validator (check) decides enum members
// and oneOf disjointness.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/char_fsa.h"
#include "grammar/json_numbers.h"
#include "grammar/json_strings.h"

namespace tern::grammar {

using ojson = nlohmann::ordered_json;

// JSON types as bits; "number" is integer | fraction.
enum : uint8_t {
  kNull = 1,
  kBoolean = 2,
  kInteger = 4,
  kFraction = 8,  // numbers that are not integers
  kString = 16,
  kArray = 32,
  kObject = 64,
  kAllTypes = 127,
};

// A conjunction of schemas of the document (no members: anything).
struct Sub {
  std::vector<const ojson*> all;
  bool any() const { return all.empty(); }
};
Sub both(const Sub& a, const Sub& b);

struct Group {
  std::vector<const ojson*> branches;
  bool one_of = false;
  std::string path;
};

// Bounds above these are refused (strict) or dropped (lenient): a string or
// array within them compiles to one state per position, and a tool schema's
// strings are also intersected with the closing tags to avoid (about 25
// times the states), hence the lower lenient limit.
constexpr uint64_t kMaxCount = 10000;  // minLength, maxLength, minItems, maxItems
constexpr uint64_t kMaxLenientCount = 128;
// minProperties / maxProperties: an object counts its members up to this.
constexpr uint64_t kMaxPropertyCount = 16;

// A constraint a lenient document did not enforce.
struct Dropped {
  std::string keyword, path, why;
};

struct Shape {
  uint8_t types = kAllTypes;
  std::optional<std::vector<ojson>> values;  // enum / const
  StringRules strings;
  NumberBounds numbers;
  std::vector<Sub> prefix;  // prefixItems
  Sub items;                // the items after the prefix
  uint64_t min_items = 0;
  int64_t max_items = -1;
  std::vector<std::pair<std::string, Sub>> properties;
  std::vector<std::string> required;
  Sub additional;
  bool additional_given = false;  // some member says additionalProperties
  Sub names;                      // propertyNames
  uint64_t min_properties = 0;
  int64_t max_properties = -1;
  std::vector<Group> groups;  // anyOf / oneOf, all to hold
  std::string path;           // where it comes from, for messages

  // Anything at all (no keyword constrains it).
  bool unconstrained() const;
  const Sub* property(const std::string& name) const;
};

class SchemaDocument {
 public:
  // `root` must outlive the document.
  explicit SchemaDocument(const ojson& root, bool lenient = false);

  const ojson& root() const { return root_; }
  static const ojson* false_schema();
  // Where a schema is (a JSON pointer such as #/properties/a).
  std::string path(const ojson* s) const;

  Shape shape(const Sub& s);
  Shape shape(const ojson* s) { return shape(Sub{{s}}); }
  // a and b both hold (the shape of their allOf).
  Shape merge(const Shape& a, const Shape& b);
  // The validator's verdict on a value (enum members, oneOf checks).
  bool check(const Shape& s, const ojson& value, int depth = 0);
  // The branches of a oneOf can never both match (else an Error; lenient:
  // false, the oneOf then read as an anyOf).
  bool check_disjoint(const Group& g);

  bool lenient() const { return lenient_; }
  // Strict: an Error "JSON Schema: {why} at {path}"; lenient: noted (once per
  // keyword and place) for the caller to drop.
  void refuse(const std::string& keyword, const std::string& path, const std::string& why);
  const std::vector<Dropped>& dropped() const { return dropped_; }
  // After an Error thrown part-way through a reading (lenient callers go on).
  void recover() { resolving_.clear(); }

 private:
  void read(Shape& sh, const ojson* s, int depth);
  void read_object(Shape& own, const ojson& s);
  void read_pattern(const ojson& p, const std::string& where, StringRules& rules);
  void read_numbers(const ojson& s, const std::string& where, NumberBounds& out);
  // The target of a local $ref (nullptr, lenient, when it has none).
  const ojson* resolve(const std::string& ref, const ojson* from);
  void name(const ojson* child, const ojson* parent, const std::string& step);
  const CharFsa& language(const std::string& pattern, bool format);
  static std::vector<ojson> merge_values(const std::vector<ojson>& a, const std::vector<ojson>& b);

  const ojson& root_;
  bool lenient_;
  std::vector<Dropped> dropped_;
  std::unordered_map<const ojson*, std::string> paths_;
  std::vector<const ojson*> resolving_;  // $ref chain being followed
  std::map<std::pair<std::string, bool>, CharFsa> languages_;
};

}  // namespace tern::grammar
