// Reading a text corpus into documents, and joining them for the tokenizer.
//
// A path is read as:
//   - a folder: every regular file in it (not in subfolders), in name order, skipping
//     hidden files and the fortune index files `*.dat` and `*.u8`; each file as below;
//   - a file in the fortunes format (it has a line holding only `%`): one document per
//     record (the text between `%` lines), with backspace overstrikes ("_\bx", "x\bx")
//     reduced to the last character and records that are only whitespace dropped;
//   - any other file: one document, its whole contents.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace gpumix::data {

// Throws std::runtime_error naming the path when it is missing, unreadable, or yields no
// text at all.
std::vector<std::string> read_documents(const std::string& path);

// The records of one fortunes-format text.
std::vector<std::string> parse_fortunes(std::string_view text);

// Removes backspace overstrikes: each '\b' deletes the byte before it.
std::string strip_overstrikes(std::string_view text);

// The documents joined with <|endoftext|> between them (GPT-2's convention).
std::string join_documents(const std::vector<std::string>& docs);

// read_documents then join_documents.
std::string read_corpus(const std::string& path);

}  // namespace gpumix::data
