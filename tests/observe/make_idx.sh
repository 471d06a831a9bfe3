#!/bin/sh
# Writes COUNT generated 28x28 images and their labels (a pattern of the
# label, pixels 1..250) as gzipped IDX files in DIR, named as Debian's
# Fashion-MNIST, the test set a copy of the training set.
# Usage: make_idx.sh DIR COUNT   (COUNT below 65536)
set -eu
dir=$1 count=$2
be32() { printf "\\$(printf %o $(($1 >> 24 & 255)))\\$(printf %o $(($1 >> 16 & 255)))"; \
         printf "\\$(printf %o $(($1 >> 8 & 255)))\\$(printf %o $(($1 & 255)))"; }
{
    printf '\0\0\10\3'; be32 "$count"; be32 28; be32 28
    LC_ALL=C awk -v n="$count" 'BEGIN { for (i = 0; i < n; i++) for (j = 0; j < 784; j++)
        printf "%c", 1 + (j * (i % 10 + 1) + 7 * i) % 250 }'
} > "$dir/train-images-idx3-ubyte"
{
    printf '\0\0\10\1'; be32 "$count"
    LC_ALL=C awk -v n="$count" 'BEGIN { for (i = 0; i < n; i++) printf "%c", i % 10 }'
} > "$dir/train-labels-idx1-ubyte"
size=$(wc -c < "$dir/train-images-idx3-ubyte")
[ "$size" -eq $((16 + count * 784)) ] || { echo "make_idx.sh: the images take $size bytes"; exit 1; }
cp "$dir/train-images-idx3-ubyte" "$dir/t10k-images-idx3-ubyte"
cp "$dir/train-labels-idx1-ubyte" "$dir/t10k-labels-idx1-ubyte"
gzip "$dir"/*-ubyte
