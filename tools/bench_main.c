/* ug-bench: dispatches to a subcommand (bench.h). */
#include <stdio.h>
#include <string.h>

#include "bench.h"

static const bench_command commands[] = {
    {"gemm", "GFLOP/s of ug_matmul on each device beside OpenBLAS", bench_gemm},
    {"train-mlp", "ug-train's step and epoch beside its products in OpenBLAS", bench_train_mlp},
    {"train-cnn", "the same for ug-train --model cnn (im2col products)", bench_train_cnn},
    {"gpt", "examples/gpt.c's step on each device, beside PyTorch's", bench_gpt},
    {"resnet", "examples/resnet.c's ResNet-20 step on each device, beside PyTorch's", bench_resnet},
    {"conv", "the CNN's convolutions beside oneDNN's and im2col + OpenBLAS", bench_conv},
    {"report", "all of the above on every device: CSV, JSON, plots, Markdown", bench_report},
    {"compare", "two reports' figures side by side, with their ratios", bench_compare},
    {"data-parallel", "weak scaling under mpirun: a rank's step alone against all", bench_data_parallel},
    {"pipeline", "a deep MLP over pipeline stages: the bubble and each stage's memory", bench_pipeline},
    {"tune", "measure and cache each device's tunable choices (CLBlast's)", bench_tune},
    {"load", "the MLP's epoch on a busy cpu: its thread budget against one", bench_load},
};
#define COMMAND_COUNT (sizeof commands / sizeof commands[0])

static void usage(FILE *out)
{
    fprintf(out, "usage: ug-bench COMMAND [options]   (ug-bench COMMAND --help)\n");
    for (size_t i = 0; i < COMMAND_COUNT; i++)
        fprintf(out, "  %-13s %s\n", commands[i].name, commands[i].summary);
}

static void print_warning(const char *message, void *user)
{
    (void)user;
    fprintf(stderr, "ug-bench: warning: %s\n", message);
}

int main(int argc, char **argv)
{
    ug_set_warning_handler(print_warning, NULL);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < COMMAND_COUNT; i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "ug-bench: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
