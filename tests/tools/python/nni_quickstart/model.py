# Stands in for NNI's quickstart model.py (a PyTorch model, not installed
# here) with the same three NNI calls in the same places: the parameters
# with defaults, one intermediate accuracy per epoch, the final accuracy.
import nni

params = {
    'features': 512,
    'lr': 0.001,
    'momentum': 0,
}
optimized_params = nni.get_next_parameter()
params.update(optimized_params)
print(params)

accuracy = 0.0
for t in range(5):
    # A made-up accuracy that is best near lr 0.01 and momentum 0.9.
    accuracy = (1 - abs(params['lr'] - 0.01) - abs(params['momentum'] - 0.9) / 10
                - abs(params['features'] - 512) / 10000) * (t + 1) / 5
    nni.report_intermediate_result(accuracy)
nni.report_final_result(accuracy)
