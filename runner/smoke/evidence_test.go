package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestStartedLineShape(t *testing.T) {
	l := startedLine("ord-1")
	assert.Equal(t, "shoppingmall-order started order=ord-1 spot=shoppingmall.order-workflow/ord-1", l)
	g := startedLineRE.FindStringSubmatch(l)
	if assert.NotNil(t, g) {
		assert.Equal(t, []string{"ord-1", "ord-1"}, g[1:])
	}
	for _, bad := range []string{
		"x " + l,
		l + " x",
		"shoppingmall-order started order=ord-1 spot=other.kind/ord-1",
		`{"msg":"` + l + `"}`,
	} {
		assert.Nil(t, startedLineRE.FindStringSubmatch(bad), bad)
	}
	assert.True(t, repeatedRE.MatchString("shoppingmall-order external-effect-repeated order=ord-1"))
	assert.False(t, repeatedRE.MatchString("level=INFO shoppingmall-order external-effect-repeated order=ord-1"))
}

func TestOtherWorkflow(t *testing.T) {
	assert.Equal(t, "workflow-b", otherWorkflow("workflow-a"))
	assert.Equal(t, "workflow-a", otherWorkflow("workflow-b"))
}
