#!/usr/bin/env bash
# Prints 1 when LeakSanitizer can run here, else 0. It needs ptrace-like access to stop
# threads, and in some containers it aborts every program: probed with a tiny program.
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf 'int main(){return 0;}\n' > "$probe/p.cpp"
if clang++ -fsanitize=address "$probe/p.cpp" -o "$probe/p" 2>/dev/null &&
   ASAN_OPTIONS=detect_leaks=1 "$probe/p" >/dev/null 2>&1; then
  echo 1
else
  echo 0
fi
