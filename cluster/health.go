package cluster

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/automanaged"
	"github.com/labstack/echo"
)

// healthServer is the automanaged provider's membership endpoint
// (GET /_health, which every member polls on every seed), served on a
// listener bound to the member's -bind host. The provider itself would
// listen on 0.0.0.0 (its address is hard-coded), but it serves a
// pre-bound echo server when it is given one: echo uses a listener set
// before Start instead of binding its own. That is the provider's testing
// constructor, and the only thing it changes besides is that the provider
// no longer adds the /_health route itself, so it is added here with the
// provider's own reply.
type healthServer struct {
	echo    *echo.Echo
	cluster atomic.Pointer[pcluster.Cluster]
}

// bindHealth binds host:port now, so a taken port fails the start at
// once instead of leaving a member nobody can see.
func bindHealth(host string, port int) (*healthServer, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("cluster: automanaged health listener: %w", err)
	}
	h := &healthServer{echo: echo.New()}
	h.echo.HideBanner, h.echo.HidePort = true, true
	h.echo.Listener = ln
	h.echo.GET("/_health", func(ctx echo.Context) error {
		c := h.cluster.Load()
		if c == nil {
			return ctx.NoContent(http.StatusServiceUnavailable)
		}
		addr, mport, err := c.ActorSystem.GetHostPort()
		if err != nil {
			return ctx.NoContent(http.StatusServiceUnavailable)
		}
		return ctx.JSON(http.StatusOK, automanaged.NewNode(c.Config.Name, c.ActorSystem.ID, addr, mport, port, c.GetClusterKinds()))
	})
	return h, nil
}

// serve makes the endpoint answer for c; the provider starts the server
// when the member starts.
func (h *healthServer) serve(c *pcluster.Cluster) { h.cluster.Store(c) }
