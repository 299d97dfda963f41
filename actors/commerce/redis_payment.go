package commerce

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
)

// The Payment module on Redis: method seeds and payment records, each
// under its own id's tag.

// authorizeScript: KEYS[1] payment record; ARGV orderId, methodId,
// amount, currency, the decision ('1' or '0') and a decline's reason. The
// caller decides from the method's seed, read before; the script records
// that decision only if none is recorded, so the first result wins and a
// later change of the seed cannot change a recorded result.
var authorizeScript = redis.NewScript("#!lua\n" + authorizeHeadLua + `
redis.call('HSET', rec, 'accepted', ARGV[5], 'reason', ARGV[6], 'orderId', ARGV[1],
  'methodId', ARGV[2], 'amount', ARGV[3], 'currency', ARGV[4])
return {ARGV[5], ARGV[6]}
`)

// authorizeHeadLua begins both authorization scripts: it counts the call
// on the payment record (KEYS[1], in the local rec) and answers a
// recorded result, so the first result wins.
const authorizeHeadLua = `
local rec = KEYS[1]
redis.call('HINCRBY', rec, 'calls', 1)
local prev = redis.call('HMGET', rec, 'accepted', 'reason')
if prev[1] then
  return {prev[1], prev[2] or ''}
end
`

// decide is what the method's seed says of an authorization.
func decide(m PaymentMethod, err error) (accepted bool, reason string, _ error) {
	switch {
	case errors.Is(err, ErrNotFound):
		return false, ReasonUnknownPaymentMethod, nil
	case err != nil:
		return false, "", err
	case m.Approve:
		return true, "", nil
	case m.Reason == "":
		return false, ReasonPaymentDeclined, nil
	default:
		return false, m.Reason, nil
	}
}

// Authorize implements Payment. The method's seed lives under its own
// tag, so it is read first and the decision passed to the record's
// script: a seed changed in between decides a PaymentId that has no
// result yet, which is what a seed changed just before would do.
func (r paymentStore) Authorize(ctx context.Context, req *contracts.AuthorizePaymentReq) (*contracts.AuthorizePaymentRes, error) {
	switch {
	case req == nil || req.GetPaymentId() == "":
		return nil, invalid("paymentId is empty")
	case req.GetPaymentMethodId() == "":
		return nil, invalid("payment %q: paymentMethodId is empty", req.GetPaymentId())
	case req.GetAmount() < 0:
		return nil, invalid("payment %q: amount %d is negative", req.GetPaymentId(), req.GetAmount())
	}
	var res []string
	var err error
	if r.oneSlot {
		res, err = r.authorizeOne(ctx, req)
	} else {
		res, err = r.authorizeStepped(ctx, req)
	}
	if err != nil {
		return nil, err
	}
	out := &contracts.AuthorizePaymentRes{Accepted: res[0] == "1"}
	if !out.Accepted {
		out.Reason = &res[1]
	}
	return out, nil
}

// authorizeStepped reads the method's seed, then records the decision
// under the payment's own tag: two round trips, no script across tags.
func (r paymentStore) authorizeStepped(ctx context.Context, req *contracts.AuthorizePaymentReq) ([]string, error) {
	accepted, reason, err := decide(r.GetMethod(ctx, req.GetPaymentMethodId()))
	if err != nil {
		return nil, fmt.Errorf("authorize payment %q: %w", req.GetPaymentId(), err)
	}
	res, err := authorizeScript.Run(ctx, r.client,
		[]string{r.keys.paymentRecord(req.GetPaymentId())},
		req.GetOrderId(), req.GetPaymentMethodId(), req.GetAmount(), req.GetCurrency(),
		boolField(accepted), reason).StringSlice()
	if err != nil {
		return nil, translate("authorize payment", err)
	}
	if len(res) != 2 {
		return nil, fmt.Errorf("%w: authorize payment: unexpected reply %q", ErrCorrupt, res)
	}
	return res, nil
}

// PutMethod implements Payment.
func (r paymentStore) PutMethod(ctx context.Context, m PaymentMethod) error {
	if err := validateMethod(m); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	return translate("put payment method", r.client.HSet(ctx, r.keys.paymentMethod(m.MethodID),
		"approve", boolField(m.Approve), "reason", m.Reason).Err())
}

// GetMethod implements Payment.
func (r paymentStore) GetMethod(ctx context.Context, methodID string) (PaymentMethod, error) {
	if methodID == "" {
		return PaymentMethod{}, invalid("methodId is empty")
	}
	v, err := r.client.HGetAll(ctx, r.keys.paymentMethod(methodID)).Result()
	if err != nil {
		return PaymentMethod{}, translate("get payment method", err)
	}
	if len(v) == 0 {
		return PaymentMethod{}, fmt.Errorf("%w: payment method %q", ErrNotFound, methodID)
	}
	approve, ok := v["approve"]
	if !ok || (approve != "0" && approve != "1") {
		return PaymentMethod{}, fmt.Errorf("%w: payment method %q has approve %q", ErrCorrupt, methodID, approve)
	}
	return PaymentMethod{MethodID: methodID, Approve: approve == "1", Reason: v["reason"]}, nil
}

// AuthorizeCalls implements Payment.
func (r paymentStore) AuthorizeCalls(ctx context.Context, paymentID string) (int64, error) {
	return r.counter(ctx, r.keys.paymentRecord(paymentID), "calls")
}

// Captured implements Payment. Only the first, recorded result counts, so
// the answer is the amount once however often Authorize ran.
func (r paymentStore) Captured(ctx context.Context, paymentID string) (int64, error) {
	v, err := r.client.HMGet(ctx, r.keys.paymentRecord(paymentID), "accepted", "amount").Result()
	if err != nil {
		return 0, translate("get captured amount", err)
	}
	if s, _ := v[0].(string); s != "1" {
		return 0, nil
	}
	raw, _ := v[1].(string)
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: payment %q amount is %q", ErrCorrupt, paymentID, raw)
	}
	return n, nil
}

func boolField(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
