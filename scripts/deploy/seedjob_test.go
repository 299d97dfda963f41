package deploy

import (
	"context"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// The seed Job (k8s/seed-job.yaml) runs the seed subcommand of an image
// the Dockerfile builds, with flags that subcommand has, the Redis URL
// from the same Secret key the workflows read, as a non-root pod that
// restarts on failure and ends. Its command line, run here against a
// redis-server of the test's own with that variable, writes the demo
// catalogue.
func TestSeedJobRunsTheImagesSeedSubcommand(t *testing.T) {
	root := moduleRoot(t)
	m := readManifests(t, root)
	d := readDockerfile(t, root)
	dir := build(t)

	require.Len(t, m.jobs, 1)
	job := m.jobs[0]
	where := "Job " + job.Name
	require.NotNil(t, job.Spec.BackoffLimit, "%s: a bounded number of retries", where)
	require.NotNil(t, job.Spec.ActiveDeadlineSeconds, "%s: a bounded run", where)
	pod := job.Spec.Template.Spec
	require.Contains(t, []corev1.RestartPolicy{corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever}, pod.RestartPolicy, where)
	require.NotNil(t, pod.SecurityContext, where)
	require.NotNil(t, pod.SecurityContext.RunAsNonRoot, where)
	require.True(t, *pod.SecurityContext.RunAsNonRoot, "%s: runs as non-root, as the image's user", where)
	require.Len(t, pod.Containers, 1, where)
	c := pod.Containers[0]
	where += " container " + c.Name

	repo, _, _ := strings.Cut(c.Image, ":")
	ep, ok := d.entrypoint[path.Base(repo)]
	require.True(t, ok, "%s: image %s names a Dockerfile target", where, c.Image)
	require.Empty(t, c.Command, "%s: runs the image's entrypoint", where)
	require.NotEmpty(t, c.Args, where)
	require.Equal(t, "seed", c.Args[0], "%s: runs the seed subcommand", where)
	bin := filepath.Join(dir, path.Base(ep[0]))
	flags := binaryFlags(t, bin, "seed")
	for _, a := range c.Args[1:] {
		if name, ok := strings.CutPrefix(a, "-"); ok {
			name, _, _ = strings.Cut(strings.TrimPrefix(name, "-"), "=")
			require.True(t, flags[name], "%s: %s is a flag of %s seed", where, a, ep[0])
		}
	}
	for _, e := range c.Env {
		if f, ok := envFlag(e.Name); ok {
			require.True(t, flags[f], "%s: %s sets -%s, a flag of %s seed", where, e.Name, f, ep[0])
		}
	}

	// The same Redis as the workflows, from the same Secret key.
	redisRef := findEnv(c.Env, "SHOPPINGMALL_REDIS").ValueFrom.SecretKeyRef
	require.NotNil(t, redisRef, "%s: the Redis URL comes from a Secret", where)
	require.True(t, m.secretHas(redisRef.Name, redisRef.Key), "%s: Secret %s has key %s", where, redisRef.Name, redisRef.Key)
	i := slices.IndexFunc(m.deployments, func(d *appsv1.Deployment) bool { return d.Name == "order-workflow" })
	require.GreaterOrEqual(t, i, 0)
	wfRef := findEnv(m.deployments[i].Spec.Template.Spec.Containers[0].Env, "SHOPPINGMALL_REDIS").ValueFrom.SecretKeyRef
	require.NotNil(t, wfRef)
	require.Equal(t, wfRef.Name, redisRef.Name, "%s: the workflows' Secret", where)
	require.Equal(t, wfRef.Key, redisRef.Key, "%s: the workflows' Secret key", where)

	// The Job's command line against a real Redis.
	if slices.Contains(c.Args, "-file") {
		t.Logf("%s seeds from a file; its command line is not run here", where)
		return
	}
	url, client := startRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, c.Args...)
	cmd.Env = append(os.Environ(), "SHOPPINGMALL_REDIS="+url)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %s:\n%s", ep[0], strings.Join(c.Args, " "), out)
	require.Contains(t, string(out), "seeded 2 carts, 3 SKUs, 2 payment methods", "%s: the demo catalogue", where)
	// Carts, stock with its ledger per SKU, payment methods.
	n, err := client.DBSize(ctx).Result()
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, int64(2+3+3+2), "%s: the catalogue's keys are in Redis", where)
	t.Logf("%s: %s %s -> %s (%d keys)", where, ep[0], strings.Join(c.Args, " "), strings.TrimSpace(string(out)), n)
}

// startRedis starts a redis-server of the test's own on a unix socket
// (stopped when the test ends) and returns its URL and a client.
func startRedis(t *testing.T) (string, *redis.Client) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	require.NoError(t, err, "redis-server is required (make redis)")
	dir := t.TempDir()
	sock := filepath.Join(dir, "redis.sock")
	cmd := exec.Command(bin, "--port", "0", "--unixsocket", sock, "--dir", dir, "--save", "", "--appendonly", "no")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	client := redis.NewClient(&redis.Options{Network: "unix", Addr: sock})
	t.Cleanup(func() { _ = client.Close() })
	require.Eventually(t, func() bool { return client.Ping(context.Background()).Err() == nil }, 10*time.Second, 20*time.Millisecond, "redis-server answers")
	t.Logf("redis-server pid=%d addr=%s", cmd.Process.Pid, sock)
	return "unix://" + sock + "?db=0", client
}
