// Package runner holds no code: it is the root of the tools that start,
// load and check a local cluster from outside (localcluster, client,
// smoke, bench, soak, redisserver). Its test states what they all must
// not link: they talk to the cluster over HTTP and Redis only, so neither
// the HTTP framework nor the actor runtime, and no binary links package
// testing.
package runner
