#include "server/tokenizer/pre_tokenizer.h"

#include <functional>
#include <utility>

#include "base/status_macros.h"
#include "base/utf8.h"
#include "server/tokenizer/unicode.h"

namespace tpserve {
namespace {

using Matches = std::vector<std::pair<size_t, size_t>>;
using FindFn = std::function<absl::Status(std::string_view, Matches*)>;

struct Segment {
  size_t begin;
  size_t end;
  bool is_match;
};

// Matches and the gaps between them, covering [0, size).
std::vector<Segment> Segments(const Matches& matches, size_t size, bool invert) {
  std::vector<Segment> out;
  size_t prev = 0;
  for (const auto& [begin, end] : matches) {
    if (prev != begin) out.push_back({prev, begin, invert});
    out.push_back({begin, end, !invert});
    prev = end;
  }
  if (prev != size) out.push_back({prev, size, invert});
  return out;
}

// Applies one of Hugging Face's SplitDelimiterBehavior rules.
std::vector<Segment> ApplyBehavior(std::vector<Segment> segs, SplitBehavior behavior) {
  std::vector<Segment> out;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      return segs;
    case SplitBehavior::kRemoved:
      for (const Segment& s : segs) {
        if (!s.is_match) out.push_back(s);
      }
      return out;
    case SplitBehavior::kMergedWithPrevious:
      for (const Segment& s : segs) {
        if (s.is_match && !previous_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back(s);
        }
        previous_match = s.is_match;
      }
      return out;
    case SplitBehavior::kMergedWithNext:
      for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty()) {
          out.back().begin = it->begin;
        } else {
          out.push_back(*it);
        }
        previous_match = it->is_match;
      }
      return std::vector<Segment>(out.rbegin(), out.rend());
    case SplitBehavior::kContiguous:
      for (size_t i = 0; i < segs.size(); ++i) {
        if (i > 0 && segs[i].is_match == previous_match) {
          out.back().end = segs[i].end;
        } else {
          out.push_back(segs[i]);
        }
        previous_match = segs[i].is_match;
      }
      return out;
  }
  return out;
}

absl::Status SplitPieces(const FindFn& find, SplitBehavior behavior, bool invert,
                         PieceList* pieces) {
  std::vector<PieceSpan> out;
  out.reserve(pieces->spans.size() * 2);
  Matches matches;
  for (const PieceSpan& span : pieces->spans) {
    const std::string_view text =
        std::string_view(pieces->text).substr(span.begin, span.end - span.begin);
    matches.clear();
    TPSERVE_RETURN_IF_ERROR(find(text, &matches));
    for (const Segment& seg : ApplyBehavior(Segments(matches, text.size(), invert), behavior)) {
      if (seg.begin == seg.end) continue;
      out.push_back({span.begin + seg.begin, span.begin + seg.end,
                     span.at_origin && seg.begin == 0});
    }
  }
  pieces->spans = std::move(out);
  return absl::OkStatus();
}

// Each code point satisfying `pred` is one match.
FindFn CharMatcher(bool (*pred)(char32_t)) {
  return [pred](std::string_view text, Matches* matches) {
    size_t pos = 0;
    while (pos < text.size()) {
      const size_t begin = pos;
      if (pred(NextCodePoint(text, &pos))) matches->emplace_back(begin, pos);
    }
    return absl::OkStatus();
  };
}

FindFn RegexMatcher(const Regex& regex) {
  return [&regex](std::string_view text, Matches* matches) {
    return regex.FindAll(text, matches);
  };
}

// Rebuilds the text span by span; `rewrite` appends the new text of one span.
void RewritePieces(PieceList* pieces,
                   const std::function<void(std::string_view, const PieceSpan&, std::string*)>&
                       rewrite) {
  std::string text;
  text.reserve(pieces->text.size() + pieces->spans.size() * 4);
  for (PieceSpan& span : pieces->spans) {
    const size_t begin = text.size();
    rewrite(std::string_view(pieces->text).substr(span.begin, span.end - span.begin), span,
            &text);
    span.begin = begin;
    span.end = text.size();
  }
  pieces->text = std::move(text);
}

}  // namespace

const char ByteLevelPreTokenizer::kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

absl::Status SplitPreTokenizer::PreTokenize(PieceList* pieces) const {
  return SplitPieces(RegexMatcher(*pattern_), behavior_, invert_, pieces);
}

absl::Status ByteLevelPreTokenizer::PreTokenize(PieceList* pieces) const {
  if (add_prefix_space_) {
    RewritePieces(pieces, [](std::string_view text, const PieceSpan&, std::string* out) {
      if (text.empty() || text[0] != ' ') out->push_back(' ');
      out->append(text);
    });
  }
  if (gpt2_regex_ == nullptr) return absl::OkStatus();
  return SplitPieces(RegexMatcher(*gpt2_regex_), SplitBehavior::kIsolated, false, pieces);
}

absl::Status MetaspacePreTokenizer::PreTokenize(PieceList* pieces) const {
  RewritePieces(pieces, [this](std::string_view text, const PieceSpan& span, std::string* out) {
    const bool prepend =
        scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && span.at_origin);
    const bool starts_with_replacement =
        text.substr(0, 1) == " " || text.substr(0, replacement_.size()) == replacement_;
    if (prepend && !starts_with_replacement) out->append(replacement_);
    for (char c : text) {
      if (c == ' ') {
        out->append(replacement_);
      } else {
        out->push_back(c);
      }
    }
  });
  if (!split_) return absl::OkStatus();
  const std::string& needle = replacement_;
  return SplitPieces(
      [&needle](std::string_view text, Matches* matches) {
        for (size_t pos = 0; (pos = text.find(needle, pos)) != std::string_view::npos;
             pos += needle.size()) {
          matches->emplace_back(pos, pos + needle.size());
        }
        return absl::OkStatus();
      },
      SplitBehavior::kMergedWithNext, false, pieces);
}

absl::Status DigitsPreTokenizer::PreTokenize(PieceList* pieces) const {
  return SplitPieces(CharMatcher(&IsNumeric),
                     individual_ ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, false,
                     pieces);
}

absl::Status WhitespaceSplitPreTokenizer::PreTokenize(PieceList* pieces) const {
  return SplitPieces(CharMatcher(&IsWhitespace), SplitBehavior::kRemoved, false, pieces);
}

absl::Status SequencePreTokenizer::PreTokenize(PieceList* pieces) const {
  for (const auto& step : steps_) {
    TPSERVE_RETURN_IF_ERROR(step->PreTokenize(pieces));
  }
  return absl::OkStatus();
}

}  // namespace tpserve
