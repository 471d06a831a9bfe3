/* What ug-train prints and logs (train_report.h). */
#define _POSIX_C_SOURCE 200809L
#include "train_report.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

#include "wrap.h"

static const char *plural(long long n) { return n == 1 ? "" : "s"; }

/* "MLP 784-500-10", "CNN 784-conv32-conv64-128-10". */
static void describe_model(const mlp_config *m, char *buf, size_t len)
{
    if (m->cnn) {
        snprintf(buf, len, "CNN %lld-conv32-conv64-128-%lld", (long long)m->inputs, (long long)m->classes);
        return;
    }
    size_t used = (size_t)snprintf(buf, len, "MLP %lld", (long long)m->inputs);
    for (int i = 0; i <= m->hidden_count && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "-%lld",
                                 (long long)(i < m->hidden_count ? m->hidden[i] : m->classes));
}

/* " cosine", " cosine (100 warm-up)", " step (x0.1 every 938 updates)". */
static void describe_schedule(const ug_optimizer_config *oc, char *buf, size_t len)
{
    if (oc->schedule == UG_SCHEDULE_COSINE && oc->warmup_steps)
        snprintf(buf, len, " cosine (%lld warm-up)", (long long)oc->warmup_steps);
    else if (oc->schedule == UG_SCHEDULE_COSINE)
        snprintf(buf, len, " cosine");
    else if (oc->schedule == UG_SCHEDULE_STEP)
        snprintf(buf, len, " step (x%g every %lld update%s)", (double)oc->gamma, (long long)oc->step_size,
                 plural(oc->step_size));
    else
        buf[0] = '\0';
}

static double mib(uint64_t bytes) { return (double)bytes / 1048576.0; }

void report_header(const train_options *o, ug_trainer *t, ug_device *device, const train_data *data)
{
    ug_trainer_batch_plan plan;
    if (ug_trainer_batch_search(t, &plan)) {
        printf("batch size auto: %lld: the plan needs %.2f MiB (+5%% kept free) beside %.2f MiB in use, limit "
               "%.2f MiB", (long long)ug_trainer_batch_size(t), mib(plan.bytes), mib(plan.in_use), mib(plan.limit));
        if (plan.next_bytes)
            printf("; %lld would need %.2f MiB", (long long)(2 * ug_trainer_batch_size(t)), mib(plan.next_bytes));
        printf("\n");
    }
    ug_device_info info;
    ug_device_get_info(device, &info);
    ug_graph_memory_info mem;
    ug_graph_memory(ug_trainer_graph(t), &mem);
    const ug_optimizer_config oc = ug_optimizer_get_config(ug_trainer_optimizer(t));
    char shape[MLP_MAX_HIDDEN * 21], schedule[64], val[64] = "";
    describe_model(&o->model, shape, sizeof shape);
    describe_schedule(&oc, schedule, sizeof schedule);
    if (data->val)
        snprintf(val, sizeof val, ", %lld validation", (long long)ug_dataset_count(data->val));
    char described[sizeof info.id + sizeof info.name + sizeof info.vendor + 8];
    snprintf(described, sizeof described, "%s (%s, %s)", info.id, info.name, info.vendor);
    print_wrapped(stdout, "unigrad ug-train: ", described);
    char precision[96];
    snprintf(precision, sizeof precision, "%s", ug_dtype_name(o->model.precision));
    if (ug_device_precision(device, o->model.precision) != o->model.precision)
        snprintf(precision, sizeof precision, "%s, computed in f32", ug_dtype_name(o->model.precision));
    printf("model %s (%s), dropout %g, %s lr %g%s\n"
           "  batch %lld, %d epoch%s, seed %llu; %lld training%s and %lld test samples\n",
           shape, precision, (double)o->model.dropout,
           oc.type == UG_SGD ? "SGD" : oc.type == UG_ADAM ? "Adam" : "AdamW", (double)oc.lr, schedule,
           (long long)ug_trainer_batch_size(t), o->epochs, plural(o->epochs), (unsigned long long)o->seed,
           (long long)ug_dataset_count(data->train), val, (long long)ug_dataset_count(data->test));
    printf("step plan: %d kernels (%d fused away, %d recomputing activations)\n"
           "  memory: %.2f MiB of activations, %.2f MiB of gradients, %.2f MiB in all\n", mem.nodes, mem.fused,
           mem.recomputed, mib(mem.activation_bytes), mib(mem.gradient_bytes), mib(mem.total_bytes));
    const long long updates = (long long)ug_optimizer_steps(ug_trainer_optimizer(t));
    if (o->resume)
        printf("resumed from %s: epoch %lld, %lld update%s done\n", o->resume,
               (long long)ug_trainer_epochs_done(t) + 1, updates, plural(updates));
    fflush(stdout);
}

/* The epoch's figures on lines within 80 columns; the first starts with
 * "epoch N: train loss" and one says "test accuracy N%" (scripts read
 * them). */
void report_epoch(const ug_trainer *t, const ug_trainer_epoch *e, const ug_trainer_metrics *test)
{
    printf("epoch %lld: train loss %.4f (accuracy %.2f%%) in %.1f s, %.0f samples/s\n", (long long)e->epoch + 1,
           e->train.loss, 100.0 * e->train.accuracy, e->seconds, e->samples_per_second);
    if (e->validation.samples)
        printf("  validation loss %.4f (accuracy %.2f%%)\n", e->validation.loss, 100.0 * e->validation.accuracy);
    printf("  test loss %.4f, test accuracy %.2f%%\n", test->loss, 100.0 * test->accuracy);
    ug_loss_scaler_state scaler;
    if (ug_optimizer_loss_scaler(ug_trainer_optimizer(t), &scaler) == UG_OK)
        printf("loss scale %g, %lld step%s skipped so far\n", (double)scaler.scale,
               (long long)scaler.skipped_steps, plural(scaler.skipped_steps));
}

void csv_step(FILE *csv, const ug_trainer_step *s, float loss)
{
    fprintf(csv, "step,%lld,%lld,%.6f,,,,%.6g,%.1f,%lld,,\n", (long long)s->epoch + 1, (long long)s->batch + 1,
            (double)loss, (double)s->lr, s->samples_per_second, (long long)s->global_batch);
}

void csv_epoch(FILE *csv, const ug_trainer_epoch *e, const ug_trainer_metrics *test, int64_t steps,
               int64_t global_step, float lr)
{
    char val_loss[32] = "", val_accuracy[32] = "";
    if (e->validation.samples) {
        snprintf(val_loss, sizeof val_loss, "%.6f", e->validation.loss);
        snprintf(val_accuracy, sizeof val_accuracy, "%.4f", 100.0 * e->validation.accuracy);
    }
    fprintf(csv, "epoch,%lld,%lld,%.6f,%s,%.6f,%.4f,%.6g,%.1f,%lld,%.4f,%s\n", (long long)e->epoch + 1,
            (long long)steps, e->train.loss, val_loss, test->loss, 100.0 * test->accuracy, (double)lr,
            e->samples_per_second, (long long)global_step, 100.0 * e->train.accuracy, val_accuracy);
}

/* From /proc: the process's start in clock ticks after boot (field 22 of
 * /proc/self/stat) against the uptime. */
double seconds_since_process_start(void)
{
    char stat[1024];
    double uptime = 0;
    unsigned long long start_ticks = 0;
    FILE *f = fopen("/proc/self/stat", "r");
    size_t got = f ? fread(stat, 1, sizeof stat - 1, f) : 0;
    if (f)
        fclose(f);
    stat[got] = '\0';
    const char *fields = strrchr(stat, ')'); /* the command name may hold spaces */
    if (!fields || sscanf(fields + 1, " %*c" " %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
                          &start_ticks) != 1)
        return -1;
    f = fopen("/proc/uptime", "r");
    bool read = f && fscanf(f, "%lf", &uptime) == 1;
    if (f)
        fclose(f);
    long ticks_per_second = sysconf(_SC_CLK_TCK);
    return read && ticks_per_second > 0 ? uptime - (double)start_ticks / (double)ticks_per_second : -1;
}
