/* The examples' tokens: the bytes of a file as int32 ids 0..255 (vocabulary 256), in a
 * malloc'ed array of *n ids; NULL when the file cannot be read. */
#ifndef GPUMIX_EXAMPLE_READ_BYTES_H
#define GPUMIX_EXAMPLE_READ_BYTES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int32_t* read_bytes(const char* path, int64_t* n) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char* bytes = malloc((size_t)size);
  int32_t* tokens = malloc(sizeof(int32_t) * (size_t)size);
  if (size <= 0 || !bytes || !tokens || fread(bytes, 1, (size_t)size, f) != (size_t)size) {
    fclose(f);
    free(bytes);
    free(tokens);
    return NULL;
  }
  fclose(f);
  for (long i = 0; i < size; ++i) tokens[i] = bytes[i];
  free(bytes);
  *n = size;
  return tokens;
}

#endif
